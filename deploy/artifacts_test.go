package deploy_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/toolfleet/toolfleet/internal/natscli"
)

// The tests run in deploy/; the repository root is the Docker build context.
const root = ".."

// doc is one decoded YAML document.
type doc = map[string]any

// yamlDocs decodes every document of a YAML file, skipping empty ones.
func yamlDocs(t testing.TB, path string) []doc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []doc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d doc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// yamlFiles lists every YAML file under deploy/.
func yamlFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// get walks a decoded document: get(d, "spec", "template", "spec").
func get(v any, path ...any) any {
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

// strings of a YAML list that must hold only strings (Kubernetes refuses
// numbers in args; compose would quietly accept them).
func stringList(t testing.TB, where string, v any) []string {
	t.Helper()
	var out []string
	for i, e := range list(v) {
		s, ok := e.(string)
		if !ok {
			t.Errorf("%s[%d] = %v (%T), want a string: quote it", where, i, e, e)
			continue
		}
		out = append(out, s)
	}
	return out
}

func TestEveryYAMLFileParses(t *testing.T) {
	files := yamlFiles(t)
	for _, want := range []string{
		"docker-compose.yml", "k8s/kustomization.yaml", "k8s/coordinator.yaml", "k8s/toolworker.yaml",
		"k8s/keda/scaledobject.yaml", "k8s/values-nats.yaml", "k8s/secret.example.yaml",
	} {
		if !slices.Contains(files, filepath.FromSlash(want)) {
			t.Errorf("deploy/%s missing (found %v)", want, files)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			docs := yamlDocs(t, f)
			if len(docs) == 0 {
				t.Fatal("no YAML document")
			}
			for i, d := range docs {
				if api, kind := str(d, "apiVersion"), str(d, "kind"); api != "" || kind != "" {
					if api == "" || kind == "" {
						t.Errorf("document %d: apiVersion %q kind %q, want both", i, api, kind)
					}
					if kind != "Kustomization" && str(d, "metadata", "name") == "" {
						t.Errorf("document %d (%s): no metadata.name", i, kind)
					}
				}
			}
		})
	}
}

// ---- Dockerfile ------------------------------------------------------------

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

func dockerfile(t fatalT) []instruction {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") { // a comment inside a continued instruction
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stage is one FROM ... AS name section of the Dockerfile.
type stage struct {
	name, base string
	body       []instruction
}

func stages(t fatalT, ins []instruction) (map[string]*stage, map[string]string) {
	t.Helper()
	args := map[string]string{} // global ARG defaults
	out := map[string]*stage{}
	var cur *stage
	for _, in := range ins {
		switch {
		case in.cmd == "ARG" && cur == nil:
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			if len(f) < 3 || !strings.EqualFold(f[len(f)-2], "AS") {
				t.Fatalf("FROM %s: every stage must be named", in.args)
			}
			base := f[len(f)-3]
			for k, v := range args {
				base = strings.ReplaceAll(base, "${"+k+"}", v)
			}
			cur = &stage{name: f[len(f)-1], base: base}
			out[cur.name] = cur
		case cur != nil:
			cur.body = append(cur.body, in)
		}
	}
	return out, args
}

// dockerignore reports whether the build context leaves out rel (a slash
// path relative to the repository root), by deploy/Dockerfile.dockerignore.
type dockerignore []*regexp.Regexp

func loadDockerignore(t fatalT) dockerignore {
	t.Helper()
	b, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var out dockerignore
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf("dockerignore: exceptions (%q) are not supported by this test", line)
		}
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		re.WriteString("$")
		out = append(out, regexp.MustCompile(re.String()))
	}
	return out
}

func (d dockerignore) excluded(rel string) bool {
	for p := rel; p != "." && p != ""; p = filepath.ToSlash(filepath.Dir(p)) {
		for _, re := range d {
			if re.MatchString(p) {
				return true
			}
		}
	}
	return false
}

// goBuildLine returns the Dockerfile's "go build ..." command and the RUN
// instruction that holds it.
func goBuildLine(t fatalT, st *stage) (string, string) {
	t.Helper()
	for _, in := range st.body {
		if in.cmd == "RUN" {
			if i := strings.Index(in.args, "go build "); i >= 0 {
				return in.args[i:], in.args
			}
		}
	}
	t.Fatalf("stage %s has no RUN ... go build", st.name)
	return "", ""
}

func goModGo(t testing.TB) (goVersion, natsServer string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(b); m != nil {
		goVersion = string(m[1])
	}
	if m := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\d+\.\d+)\.`).FindSubmatch(b); m != nil {
		natsServer = string(m[1])
	}
	if goVersion == "" || natsServer == "" {
		t.Fatalf("go.mod: go %q, nats-server %q", goVersion, natsServer)
	}
	return goVersion, natsServer
}

func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	st, args := stages(t, ins)
	ignore := loadDockerignore(t)
	goVersion, _ := goModGo(t)

	build, ok := st["build"]
	if !ok {
		t.Fatal("no build stage")
	}
	if want := "golang:" + goVersion; !strings.HasPrefix(build.base, want) {
		t.Errorf("build stage FROM %s, want %s* (go.mod says go %s)", build.base, want, goVersion)
	}
	cmd, run := goBuildLine(t, build)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w"`, "-o /out/"} {
		if !strings.Contains(run, want) {
			t.Errorf("RUN %s: missing %s", run, want)
		}
	}
	built := map[string]bool{}
	for _, f := range strings.Fields(cmd) {
		if strings.HasPrefix(f, "./") {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("go build %s: %v", f, err)
			}
			if ignore.excluded(strings.TrimPrefix(f, "./")) {
				t.Errorf("go build %s: the dockerignore leaves it out of the context", f)
			}
			built[filepath.Base(f)] = true
		}
	}

	// COPY from the context: every source exists and is in the context.
	for _, s := range st {
		for _, in := range s.body {
			if in.cmd != "COPY" || strings.Contains(in.args, "--from=") {
				continue
			}
			f := strings.Fields(in.args)
			for _, src := range f[:len(f)-1] {
				if src == "." {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("stage %s: COPY %s: %v", s.name, src, err)
				}
				if ignore.excluded(src) {
					t.Errorf("stage %s: COPY %s: left out by the dockerignore", s.name, src)
				}
			}
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "pkg/model/scripted/demo.json", "cmd/coordinator/main.go", "cmd/toolworker/main.go", "deploy/healthcheck/main.go"} {
		if ignore.excluded(p) {
			t.Errorf("the dockerignore leaves out %s, which the build needs", p)
		}
	}
	for _, p := range []string{".git/HEAD", "deploy/.env", "deploy/k8s/values-nats.yaml", "internal/natsbus/testdata/x", "coordinator"} {
		if !ignore.excluded(p) {
			t.Errorf("the dockerignore keeps %s in the context", p)
		}
	}

	base := args["BASE_IMAGE"]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") || !strings.HasSuffix(base, ":nonroot") {
		t.Errorf("BASE_IMAGE %q, want gcr.io/distroless/static*:nonroot", base)
	}
	for _, name := range []string{"coordinator", "toolworker"} {
		t.Run(name, func(t *testing.T) {
			s, ok := st[name]
			if !ok {
				t.Fatalf("no stage %q (docker build --target %s)", name, name)
			}
			if s.base != base {
				t.Errorf("FROM %s, want %s", s.base, base)
			}
			var user, entry string
			copied := map[string]bool{}
			for _, in := range s.body {
				switch in.cmd {
				case "USER":
					user = in.args
				case "ENTRYPOINT":
					entry = in.args
				case "COPY":
					f := strings.Fields(in.args)
					from := strings.TrimPrefix(f[0], "--from=")
					src, dst := f[1], f[2]
					if from == "build" {
						if !built[filepath.Base(src)] || !strings.HasPrefix(src, "/out/") {
							t.Errorf("COPY --from=build %s: not an output of the go build", src)
						}
					} else if _, ok := st[from]; !ok {
						t.Errorf("COPY --from=%s: no such stage", from)
					}
					copied[dst] = true
				}
			}
			if !regexp.MustCompile(`^[1-9][0-9]*(:[1-9][0-9]*)?$`).MatchString(user) {
				t.Errorf("USER %q, want a numeric non-root uid (Kubernetes runAsNonRoot needs a number)", user)
			}
			bin := "/usr/local/bin/" + name
			if !copied[bin] || !copied["/usr/local/bin/healthcheck"] {
				t.Errorf("image lacks %s or /usr/local/bin/healthcheck (copied %v)", bin, copied)
			}
			var argv []string
			if err := yaml.Unmarshal([]byte(entry), &argv); err != nil || len(argv) == 0 {
				t.Fatalf("ENTRYPOINT %s: want the JSON (exec) form: %v", entry, err)
			}
			for _, a := range argv {
				if strings.HasPrefix(a, "/") && !copied[a] {
					t.Errorf("ENTRYPOINT runs %s, which the stage does not copy in", a)
				}
			}
			if argv[len(argv)-1] != bin {
				t.Errorf("ENTRYPOINT %v, want it to end with %s so that args are its flags", argv, bin)
			}
			if name == "toolworker" && !strings.HasSuffix(argv[0], "/tini") {
				t.Errorf("ENTRYPOINT %v: the toolworker needs an init (tini) as PID 1 to reap killed exec tools", argv)
			}
		})
	}
	tini := st["tini"]
	if tini == nil || !strings.HasPrefix(tini.base, "debian:") {
		t.Fatalf("tini stage: %+v", tini)
	}
	if run := tini.body[0].args; !strings.Contains(run, "install") || !strings.Contains(run, " tini") {
		t.Errorf("tini stage RUN %s: want Debian's tini package (it ships /usr/bin/tini-static)", run)
	}
}

// ---- the images' binaries, built as the Dockerfile builds them -------------

var images struct {
	once sync.Once
	dir  string
	err  error
	log  string
}

// imageBinaries builds coordinator, toolworker and healthcheck with the
// Dockerfile's own go build command, CGO_ENABLED=0, in a copy of the build
// context the dockerignore leaves, and returns the output directory.
func imageBinaries(t *testing.T) string {
	t.Helper()
	buildImageBinaries()
	if images.err != nil {
		t.Fatalf("building as the Dockerfile does: %v\n%s", images.err, images.log)
	}
	return images.dir
}

// fatalT is the part of testing.TB that the Dockerfile readers use, so
// TestMain can call them before any test exists.
type fatalT interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// buildT is a [fatalT] for TestMain: Fatal records the message and unwinds
// with errBuildT.
type buildT struct{ msg string }

var errBuildT = errors.New("build failed")

func (*buildT) Helper() {}
func (b *buildT) Fatal(args ...any) {
	b.msg = fmt.Sprint(args...)
	panic(errBuildT)
}
func (b *buildT) Fatalf(format string, args ...any) {
	b.msg = fmt.Sprintf(format, args...)
	panic(errBuildT)
}

// buildImageBinaries does the build of [imageBinaries] once per process.
func buildImageBinaries() {
	images.once.Do(func() {
		t := &buildT{}
		defer func() {
			if r := recover(); r != nil && r != errBuildT {
				panic(r)
			}
			if t.msg != "" && images.err == nil {
				images.err = errors.New(t.msg)
			}
		}()
		ins := dockerfile(t)
		st, _ := stages(t, ins)
		cmd, _ := goBuildLine(t, st["build"])
		ctxDir, err := os.MkdirTemp("", "toolfleet-docker-context-")
		if err != nil {
			images.err = err
			return
		}
		// Not t.TempDir: the result outlives the first test that asks.
		images.dir = filepath.Join(ctxDir, "out")
		if images.err = copyContext(loadDockerignore(t), ctxDir); images.err != nil {
			return
		}
		cmd = strings.ReplaceAll(cmd, "/out/", images.dir+"/")
		c := exec.Command("sh", "-c", cmd)
		c.Dir = ctxDir
		c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
		out, err := c.CombinedOutput()
		images.log = fmt.Sprintf("%s\n%s", cmd, out)
		images.err = err
	})
}

// TestMain builds what the tests run — the images' binaries and the nats
// CLI — before any test starts, so no test's deadline covers a build (which
// takes minutes on a fresh machine).
func TestMain(m *testing.M) {
	natscli.Prepare()
	fmt.Fprintln(os.Stderr, "deploy: building the images' binaries as the Dockerfile does")
	buildImageBinaries()
	code := m.Run()
	if images.dir != "" {
		os.RemoveAll(filepath.Dir(images.dir))
	}
	os.Exit(code)
}

// copyContext copies the repository, less what the dockerignore leaves out,
// into dst.
func copyContext(ignore dockerignore, dst string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		if ignore.excluded(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

func TestImageBinariesAreStatic(t *testing.T) {
	dir := imageBinaries(t)
	for _, name := range []string{"coordinator", "toolworker", "healthcheck"} {
		t.Run(name, func(t *testing.T) {
			f, err := elf.Open(filepath.Join(dir, name))
			if err != nil {
				t.Skipf("not an ELF platform: %v", err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Error("has a program interpreter: dynamically linked, it would not run on distroless/static")
				}
			}
			if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
				t.Errorf("links %v", libs)
			}
			if f.Section(".symtab") != nil {
				t.Error("has a symbol table: -ldflags=\"-s -w\" did not apply")
			}
		})
	}
	out, err := exec.Command(filepath.Join(dir, "healthcheck"), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "usage: healthcheck") {
		t.Errorf("healthcheck --help: %v\n%s", err, out)
	}
}
