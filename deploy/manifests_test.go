package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// invocation is one way the deploy files start one of our binaries.
type invocation struct {
	where  string   // file and service or container, for messages
	binary string   // coordinator | toolworker
	args   []string // what follows the binary (for the coordinator, the subcommand first)
	env    map[string]string
	// profiles are the compose profiles of the service: one with a profile
	// is not started by "docker compose up".
	profiles []string
	// oneShot is a job that runs to completion before the services start
	// (coordinator provision).
	oneShot bool
}

// subcommand returns the coordinator's subcommand ("" for the toolworker).
func (in invocation) subcommand() string {
	if in.binary == "coordinator" && len(in.args) > 0 {
		return in.args[0]
	}
	return ""
}

// flagArgs returns the arguments after the subcommand.
func (in invocation) flagArgs() []string {
	if in.subcommand() != "" {
		return in.args[1:]
	}
	return in.args
}

// flagValue returns the value given to --name (as "--name v" or "--name=v").
func (in invocation) flagValue(name string) (string, bool) {
	args := in.flagArgs()
	for i, a := range args {
		n := strings.TrimLeft(a, "-")
		if n == a {
			continue
		}
		if k, v, ok := strings.Cut(n, "="); ok && k == name {
			return v, true
		}
		if n == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// flagsUsed lists the flag names in the invocation's arguments.
func (in invocation) flagsUsed() []string {
	var out []string
	for _, a := range in.flagArgs() {
		if n := strings.TrimLeft(a, "-"); n != a && n != "" {
			n, _, _ = strings.Cut(n, "=")
			out = append(out, n)
		}
	}
	return out
}

// binaryOf names our binary behind an image or compose build target.
func binaryOf(image, target string) string {
	for _, b := range []string{"coordinator", "toolworker"} {
		if target == b || strings.Contains(image, "/"+b) {
			return b
		}
	}
	return ""
}

func composeFile(t testing.TB) doc {
	t.Helper()
	docs := yamlDocs(t, "docker-compose.yml")
	if len(docs) != 1 {
		t.Fatalf("docker-compose.yml: %d documents, want 1", len(docs))
	}
	return docs[0]
}

func composeInvocations(t testing.TB) []invocation {
	t.Helper()
	var out []invocation
	for name, svc := range get(composeFile(t), "services").(map[string]any) {
		bin := binaryOf(str(svc, "image"), str(svc, "build", "target"))
		if bin == "" {
			continue
		}
		var args []string
		if ep := get(svc, "entrypoint"); ep != nil {
			// Only the coordinator's subcommand may be chosen this way:
			// the toolworker's entrypoint is tini, which must stay PID 1.
			argv := stringList(t, "docker-compose.yml "+name+".entrypoint", ep)
			if bin != "coordinator" || len(argv) != 2 || argv[0] != "/usr/local/bin/coordinator" {
				t.Errorf("compose service %s sets entrypoint %v: only [/usr/local/bin/coordinator SUBCOMMAND] is allowed", name, argv)
			} else {
				args = append(args, argv[1])
			}
		}
		args = append(args, stringList(t, "docker-compose.yml "+name+".command", get(svc, "command"))...)
		out = append(out, invocation{
			where:    "docker-compose.yml service " + name,
			binary:   bin,
			args:     args,
			env:      stringMap(get(svc, "environment")),
			profiles: stringList(t, "docker-compose.yml "+name+".profiles", get(svc, "profiles")),
			oneShot:  bin == "coordinator" && len(args) > 0 && args[0] == "provision",
		})
	}
	return out
}

// k8sObjects returns every Kubernetes object under k8s/, by kind.
func k8sObjects(t testing.TB) map[string][]doc {
	t.Helper()
	out := map[string][]doc{}
	for _, f := range yamlFiles(t) {
		if !strings.HasPrefix(f, "k8s"+string(filepath.Separator)) {
			continue
		}
		for _, d := range yamlDocs(t, f) {
			if kind := str(d, "kind"); kind != "" {
				d["__file"] = f
				out[kind] = append(out[kind], d)
			}
		}
	}
	return out
}

func k8sInvocations(t testing.TB) []invocation {
	t.Helper()
	var out []invocation
	for _, dep := range k8sObjects(t)["Deployment"] {
		for i := range list(dep, "spec", "template", "spec", "containers") {
			c := get(dep, "spec", "template", "spec", "containers", i)
			where := fmt.Sprintf("%s container %s", dep["__file"], str(c, "name"))
			bin := binaryOf(str(c, "image"), "")
			if bin == "" {
				t.Errorf("%s: image %q is none of ours", where, str(c, "image"))
				continue
			}
			if get(c, "command") != nil {
				t.Errorf("%s sets command: it would bypass the image's entrypoint (tini for the toolworker); use args", where)
			}
			env := map[string]string{}
			for _, e := range list(c, "env") {
				env[str(e, "name")] = str(e, "value")
			}
			out = append(out, invocation{where: where, binary: bin, args: stringList(t, where+" args", get(c, "args")), env: env})
		}
	}
	return out
}

var helpFlag = regexp.MustCompile(`(?m)^\s+--?([A-Za-z0-9][A-Za-z0-9-]*)`)

// help runs a binary's --help and returns the flags it lists.
func help(t *testing.T, bin string, args ...string) (map[string]bool, string) {
	t.Helper()
	out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s --help: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	flags := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	return flags, string(out)
}

// TestDeployFlagsExist checks every flag the compose file and the
// Kubernetes manifests pass to our binaries against the binaries' own
// --help, and then has each binary parse the exact arguments (followed by
// --help, so that nothing starts): an unknown flag or a value of the wrong
// type fails there.
func TestDeployFlagsExist(t *testing.T) {
	dir := imageBinaries(t)
	invs := append(composeInvocations(t), k8sInvocations(t)...)
	if len(invs) < 4 {
		t.Fatalf("found %d invocations of our binaries in deploy/, want compose and k8s for both", len(invs))
	}
	// The commands whose flags the deploy files rely on, including
	// "coordinator run", whose connection and limit flags serve shares.
	type key struct{ binary, sub string }
	helps := map[key]map[string]bool{}
	want := []key{{"coordinator", "run"}, {"coordinator", "serve"}, {"toolworker", ""}}
	for _, in := range invs {
		want = append(want, key{in.binary, in.subcommand()})
	}
	for _, k := range want {
		if helps[k] != nil {
			continue
		}
		var args []string
		if k.sub != "" {
			args = []string{k.sub}
		}
		flags, out := help(t, filepath.Join(dir, k.binary), args...)
		if len(flags) == 0 {
			t.Errorf("%s %s --help lists no flags:\n%s", k.binary, k.sub, out)
		}
		helps[k] = flags
	}
	for _, want := range []string{"metrics-addr", "nats-url", "max-rounds"} {
		if !helps[key{"coordinator", "serve"}][want] {
			t.Errorf("coordinator serve --help does not list --%s", want)
		}
	}
	if !helps[key{"toolworker", ""}]["metrics-addr"] {
		t.Error("toolworker --help does not list --metrics-addr")
	}

	for _, in := range invs {
		t.Run(in.where, func(t *testing.T) {
			if in.oneShot {
				// coordinator provision: composeInvocations marks it by its subcommand
			} else if want := "serve"; in.binary == "coordinator" && len(in.profiles) > 0 {
				want = "submit" // a command-line helper, not a service
				if in.subcommand() != want {
					t.Fatalf("coordinator args %v: want the %s subcommand first", in.args, want)
				}
			} else if in.binary == "coordinator" && in.subcommand() != want {
				t.Fatalf("coordinator args %v: want the %s subcommand first", in.args, want)
			}
			flags := helps[key{in.binary, in.subcommand()}]
			var missing []string
			for _, f := range in.flagsUsed() {
				if !flags[f] {
					missing = append(missing, "--"+f)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%s %s: flags %v are not in its --help", in.binary, in.subcommand(), missing)
			}
			cmd := exec.Command(filepath.Join(dir, in.binary), append(slices.Clone(in.args), "--help")...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no NATS_URL: nothing may connect
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %s --help refuses the deploy arguments: %v\n%s", in.binary, strings.Join(in.args, " "), err, out)
			}
		})
	}
}

// ---- NATS users, passwords and Secrets --------------------------------------

var confVar = regexp.MustCompile(`\$(TOOLFLEET_[A-Z0-9_]+)`)

// confUsers parses nats-server.conf with nats-server's parser, giving each
// password variable a distinct value, and returns user -> password variable
// and the options.
func confUsers(t *testing.T, path string, vars map[string]bool) (map[string]string, *server.Options) {
	t.Helper()
	for v := range vars {
		t.Setenv(v, "tf-value-of-"+v)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	users := map[string]string{}
	for _, u := range opts.Users {
		v, ok := strings.CutPrefix(u.Password, "tf-value-of-")
		if !ok {
			t.Errorf("%s: user %s has a literal password; passwords come from the environment", path, u.Username)
		}
		users[u.Username] = v
	}
	return users, opts
}

// confVars lists the environment variables nats-server.conf reads.
func confVars(t testing.TB) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if code, _, _ := strings.Cut(line, "#"); true {
			for _, m := range confVar.FindAllStringSubmatch(code, -1) {
				vars[m[1]] = true
			}
		}
	}
	return vars
}

func TestGenEnvCoversTheConf(t *testing.T) {
	vars := confVars(t)
	out, err := exec.Command("sh", "gen-env.sh").Output()
	if err != nil {
		t.Fatalf("gen-env.sh: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^tf-[0-9a-f]{48}$`).MatchString(v) {
			t.Fatalf("gen-env.sh line %q, want NAME=tf-<48 hex digits>", line)
		}
		got[k] = v
	}
	if len(got) != len(vars) {
		t.Errorf("gen-env.sh sets %v, nats-server.conf reads %v", keys(got), keys(vars))
	}
	for v := range vars {
		if got[v] == "" {
			t.Errorf("gen-env.sh does not set %s", v)
		}
		t.Setenv(v, got[v])
	}
	opts, err := server.ProcessConfigFile("nats-server.conf")
	if err != nil {
		t.Fatalf("nats-server.conf with gen-env.sh's passwords: %v", err)
	}
	for _, u := range opts.Users {
		if !strings.HasPrefix(u.Password, "tf-") || len(u.Password) != 51 {
			t.Errorf("user %s: password parsed as %d characters, want gen-env.sh's 51", u.Username, len(u.Password))
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestComposeFile(t *testing.T) {
	c := composeFile(t)
	vars := confVars(t)
	users, _ := confUsers(t, "nats-server.conf", vars)
	_, natsMinor := goModGo(t)
	svcs := get(c, "services").(map[string]any)
	for _, name := range []string{"nats", "coordinator", "toolworker", "nats-cli"} {
		if svcs[name] == nil {
			t.Fatalf("no service %q", name)
		}
	}

	t.Run("nats", func(t *testing.T) {
		n := svcs["nats"]
		if img := str(n, "image"); !strings.HasPrefix(img, "nats:"+natsMinor) {
			t.Errorf("image %s, want nats:%s* (the nats-server version go.mod tests the config with)", img, natsMinor)
		}
		cmd := stringList(t, "nats.command", get(n, "command"))
		i := slices.Index(cmd, "-c")
		if i < 0 || i+1 >= len(cmd) {
			t.Fatalf("command %v: no -c CONFIG", cmd)
		}
		conf := cmd[i+1]
		var mounted bool
		for _, v := range stringList(t, "nats.volumes", get(n, "volumes")) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == conf {
				mounted = true
				if parts[0] != "./nats-server.conf" {
					t.Errorf("mounts %s at %s, want ./nats-server.conf", parts[0], conf)
				}
			}
		}
		if !mounted {
			t.Errorf("%s is not mounted", conf)
		}
		if !slices.Contains(cmd, "-m") {
			t.Errorf("command %v: no -m (monitoring, used by the healthcheck)", cmd)
		}
		env := get(n, "environment").(map[string]any)
		if !reflect.DeepEqual(keys(env), keys(vars)) {
			t.Errorf("nats environment %v, nats-server.conf reads %v", keys(env), keys(vars))
		}
		for k, v := range env {
			if want := "${" + k + ":?"; !strings.HasPrefix(fmt.Sprint(v), want) {
				t.Errorf("nats environment %s=%v, want %s...} (refuse to start without it)", k, v, want)
			}
		}
	})

	if r := get(svcs["toolworker"], "deploy", "replicas"); r != 3 {
		t.Errorf("toolworker deploy.replicas = %v, want 3", r)
	}
	for _, in := range append(composeInvocations(t), invocation{
		where: "docker-compose.yml service nats-cli", binary: "nats", env: stringMap(get(svcs["nats-cli"], "environment")),
	}) {
		t.Run(in.where, func(t *testing.T) {
			user := in.env["NATS_USER"]
			v, ok := users[user]
			if !ok {
				t.Fatalf("NATS_USER=%q is no user of nats-server.conf (%v)", user, keys(users))
			}
			if want := "${" + v + ":?"; !strings.HasPrefix(in.env["NATS_PASSWORD"], want) {
				t.Errorf("NATS_PASSWORD=%q, want ${%s:?...} (user %s's password)", in.env["NATS_PASSWORD"], v, user)
			}
			if in.env["NATS_URL"] != "nats://nats:4222" {
				t.Errorf("NATS_URL=%q, want nats://nats:4222", in.env["NATS_URL"])
			}
		})
	}
	wantUser := map[string]string{"provision": "admin", "coordinator": "coordinator", "toolworker": "worker", "nats-cli": "client", "submit": "client"}
	for svc, user := range wantUser {
		if got := str(svcs[svc], "environment", "NATS_USER"); got != user {
			t.Errorf("service %s connects as %q, want %q", svc, got, user)
		}
	}

	for _, in := range composeInvocations(t) {
		svc := strings.TrimPrefix(in.where, "docker-compose.yml service ")
		if len(in.profiles) > 0 || in.oneShot {
			continue // a command-line helper or a one-shot job: no healthcheck, no metrics
		}
		t.Run(svc+" healthcheck", func(t *testing.T) {
			port := metricsPort(t, in)
			test := stringList(t, svc+".healthcheck.test", get(svcs[svc], "healthcheck", "test"))
			want := []string{"CMD", "/usr/local/bin/healthcheck", "http://127.0.0.1:" + port + "/readyz"}
			if !reflect.DeepEqual(test, want) {
				t.Errorf("healthcheck %v, want %v", test, want)
			}
			if get(svcs[svc], "read_only") != true {
				t.Errorf("read_only is not true")
			}
			if !slices.Contains(stringList(t, svc+".cap_drop", get(svcs[svc], "cap_drop")), "ALL") {
				t.Errorf("cap_drop lacks ALL")
			}
			if dep := str(svcs[svc], "depends_on", "nats", "condition"); dep != "service_healthy" {
				t.Errorf("depends_on nats: %q, want service_healthy", dep)
			}
			if got := str(svcs[svc], "build", "dockerfile"); got != "deploy/Dockerfile" || str(svcs[svc], "build", "context") != ".." {
				t.Errorf("build %v, want context .. and dockerfile deploy/Dockerfile", get(svcs[svc], "build"))
			}
		})
	}
}

func stringMap(v any) map[string]string {
	out := map[string]string{}
	if m, ok := v.(map[string]any); ok {
		for k, v := range m {
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

// metricsPort returns the port of the invocation's --metrics-addr.
func metricsPort(t testing.TB, in invocation) string {
	t.Helper()
	addr, ok := in.flagValue("metrics-addr")
	if !ok {
		t.Fatalf("%s: no --metrics-addr", in.where)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: --metrics-addr %q: %v", in.where, addr, err)
	}
	return port
}

// ---- Kubernetes -------------------------------------------------------------

func secretKeys(t testing.TB) (string, map[string]bool) {
	t.Helper()
	secrets := k8sObjects(t)["Secret"]
	if len(secrets) != 1 {
		t.Fatalf("%d Secrets under k8s/, want the one template", len(secrets))
	}
	out := map[string]bool{}
	for k := range get(secrets[0], "stringData").(map[string]any) {
		out[k] = true
	}
	return str(secrets[0], "metadata", "name"), out
}

func helmValues(t testing.TB) doc {
	t.Helper()
	docs := yamlDocs(t, filepath.Join("k8s", "values-nats.yaml"))
	if len(docs) != 1 {
		t.Fatalf("values-nats.yaml: %d documents", len(docs))
	}
	return docs[0]
}

// helmSecretRefs maps each environment variable the NATS chart's container
// gets to the Secret key it reads.
func helmSecretRefs(t testing.TB, values doc) (string, map[string]string) {
	t.Helper()
	refs := map[string]string{}
	var name string
	for v, e := range get(values, "container", "env").(map[string]any) {
		refs[v] = str(e, "valueFrom", "secretKeyRef", "key")
		if n := str(e, "valueFrom", "secretKeyRef", "name"); name == "" || n != name {
			if name != "" {
				t.Errorf("values-nats.yaml: env %s reads Secret %q, others %q", v, n, name)
			}
			name = n
		}
	}
	return name, refs
}

func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	secretName, secretKey := secretKeys(t)
	values := helmValues(t)
	helmSecret, helmRefs := helmSecretRefs(t, values)
	if helmSecret != secretName {
		t.Errorf("values-nats.yaml reads Secret %q, the template is %q", helmSecret, secretName)
	}
	vars := confVars(t)
	users, _ := confUsers(t, "nats-server.conf", vars)
	for v := range vars {
		if !secretKey[helmRefs[v]] {
			t.Errorf("values-nats.yaml: %s reads Secret key %q, which the template lacks", v, helmRefs[v])
		}
	}

	deps := map[string]doc{}
	for _, d := range objs["Deployment"] {
		deps[str(d, "metadata", "name")] = d
	}
	wantUser := map[string]string{"toolfleet-coordinator": "coordinator", "toolfleet-toolworker": "worker"}
	if len(deps) != len(wantUser) {
		t.Errorf("Deployments %v, want %v", keys(deps), keys(wantUser))
	}
	invs := map[string]invocation{}
	for _, in := range k8sInvocations(t) {
		invs[in.binary] = in
	}
	for name, user := range wantUser {
		t.Run(name, func(t *testing.T) {
			d := deps[name]
			if d == nil {
				t.Fatal("missing")
			}
			pod := get(d, "spec", "template", "spec")
			labels := stringMap(get(d, "spec", "template", "metadata", "labels"))
			for k, v := range stringMap(get(d, "spec", "selector", "matchLabels")) {
				if labels[k] != v {
					t.Errorf("selector %s=%s does not match the pod labels %v", k, v, labels)
				}
			}
			if get(pod, "securityContext", "runAsNonRoot") != true || str(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
				t.Errorf("pod securityContext %v, want runAsNonRoot and seccompProfile RuntimeDefault", get(pod, "securityContext"))
			}
			if get(pod, "automountServiceAccountToken") != false {
				t.Error("automountServiceAccountToken is not false")
			}
			if g, ok := get(pod, "terminationGracePeriodSeconds").(int); !ok || g < 30 {
				t.Errorf("terminationGracePeriodSeconds %v, want >= 30 so work in flight can finish", get(pod, "terminationGracePeriodSeconds"))
			}
			containers := list(pod, "containers")
			if len(containers) != 1 {
				t.Fatalf("%d containers, want 1", len(containers))
			}
			c := containers[0]
			in := invs[binaryOf(str(c, "image"), "")]
			port := metricsPort(t, in)
			var portName string
			for _, p := range list(c, "ports") {
				if fmt.Sprint(get(p, "containerPort")) == port {
					portName = str(p, "name")
				}
			}
			if portName == "" {
				t.Errorf("no containerPort %s (its --metrics-addr)", port)
			}
			for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
				if got := str(c, probe, "httpGet", "path"); got != path {
					t.Errorf("%s path %q, want %s", probe, got, path)
				}
				if got := fmt.Sprint(get(c, probe, "httpGet", "port")); got != portName && got != port {
					t.Errorf("%s port %s, want %s (%s)", probe, got, portName, port)
				}
			}
			// /healthz fails while NATS is away; liveness must outlast an outage.
			period, _ := get(c, "livenessProbe", "periodSeconds").(int)
			failures, _ := get(c, "livenessProbe", "failureThreshold").(int)
			if period*failures < 120 {
				t.Errorf("livenessProbe gives up after %ds, want >= 120s so a NATS outage does not restart every pod", period*failures)
			}
			for _, r := range []string{"requests", "limits"} {
				for _, k := range []string{"cpu", "memory"} {
					if get(c, "resources", r, k) == nil {
						t.Errorf("resources.%s.%s unset", r, k)
					}
				}
			}
			sc := get(c, "securityContext")
			if get(sc, "runAsNonRoot") != true || get(sc, "readOnlyRootFilesystem") != true || get(sc, "allowPrivilegeEscalation") != false {
				t.Errorf("container securityContext %v, want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation", sc)
			}
			if !slices.Contains(list(sc, "capabilities", "drop"), any("ALL")) {
				t.Errorf("capabilities.drop %v lacks ALL", list(sc, "capabilities", "drop"))
			}
			env := map[string]any{}
			for _, e := range list(c, "env") {
				env[str(e, "name")] = e
			}
			if got := str(env["NATS_USER"], "value"); got != user {
				t.Errorf("NATS_USER %q, want %q", got, user)
			}
			ref := get(env["NATS_PASSWORD"], "valueFrom", "secretKeyRef")
			if str(ref, "name") != secretName || !secretKey[str(ref, "key")] {
				t.Errorf("NATS_PASSWORD from %v, want a key of Secret %s %v", ref, secretName, keys(secretKey))
			}
			// The server reads user's password from the same key.
			if want := helmRefs[users[user]]; str(ref, "key") != want {
				t.Errorf("NATS_PASSWORD reads key %q; the server reads user %s's password (%s) from %q", str(ref, "key"), user, users[user], want)
			}
			if got := str(env["NATS_URL"], "value"); got != "nats://nats.toolfleet.svc:4222" {
				t.Errorf("NATS_URL %q, want the chart's service nats.toolfleet.svc:4222", got)
			}
		})
	}

	t.Run("PodDisruptionBudget", func(t *testing.T) {
		var found bool
		for _, p := range objs["PodDisruptionBudget"] {
			sel := stringMap(get(p, "spec", "selector", "matchLabels"))
			labels := stringMap(get(deps["toolfleet-toolworker"], "spec", "template", "metadata", "labels"))
			match := len(sel) > 0
			for k, v := range sel {
				match = match && labels[k] == v
			}
			if match {
				found = true
				if get(p, "spec", "maxUnavailable") == nil && get(p, "spec", "minAvailable") == nil {
					t.Error("toolworker PDB sets neither maxUnavailable nor minAvailable")
				}
			}
		}
		if !found {
			t.Error("no PodDisruptionBudget selects the toolworker pods")
		}
	})

	t.Run("kustomizations", func(t *testing.T) {
		listed := map[string]bool{}
		for _, k := range objs["Kustomization"] {
			dir := filepath.Dir(k["__file"].(string))
			for _, r := range stringList(t, "resources", get(k, "resources")) {
				p := filepath.Join(dir, r)
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s: resource %s: %v", k["__file"], r, err)
				}
				listed[p] = true
			}
			if str(k, "namespace") != "toolfleet" {
				t.Errorf("%s: namespace %q, want toolfleet", k["__file"], str(k, "namespace"))
			}
		}
		for kind, ds := range objs {
			for _, d := range ds {
				f := d["__file"].(string)
				if kind != "Kustomization" && kind != "Secret" && !listed[f] {
					t.Errorf("%s (%s) is in no kustomization", f, kind)
				}
			}
		}
	})
}

// TestKEDAScaledObject checks that the autoscaler watches the consumers the
// toolworkers really pull from, on the stream and monitoring port the rest
// of deploy/ sets up.
func TestKEDAScaledObject(t *testing.T) {
	objs := k8sObjects(t)
	sos := objs["ScaledObject"]
	if len(sos) != 1 {
		t.Fatalf("%d ScaledObjects, want 1", len(sos))
	}
	so := sos[0]
	if got := str(so, "spec", "scaleTargetRef", "name"); got != "toolfleet-toolworker" {
		t.Errorf("scaleTargetRef %q, want the toolworker Deployment", got)
	}
	var worker invocation
	for _, in := range k8sInvocations(t) {
		if in.binary == "toolworker" {
			worker = in
		}
	}
	if _, ok := worker.flagValue("tools"); ok {
		t.Fatal("the toolworker serves a manifest; list its tools' consumers here")
	}
	builtins, ok := worker.flagValue("builtin")
	if !ok {
		t.Fatal("the toolworker has no --builtin list")
	}
	prefix, _ := worker.flagValue("prefix")
	subjects, err := protocol.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tool := range strings.Split(builtins, ",") {
		c, err := subjects.Consumer(protocol.ToolName(strings.TrimSpace(tool)))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, c)
	}
	sort.Strings(want)

	values := helmValues(t)
	monitorPort := fmt.Sprint(get(values, "config", "monitor", "port"))
	if get(values, "config", "monitor", "enabled") != true {
		t.Error("values-nats.yaml: monitoring is off; KEDA reads it")
	}
	var got []string
	for i, tr := range list(so, "spec", "triggers") {
		md := get(tr, "metadata")
		if str(tr, "type") != "nats-jetstream" {
			t.Errorf("trigger %d: type %q", i, str(tr, "type"))
		}
		if str(md, "stream") != subjects.CallsStream() {
			t.Errorf("trigger %d: stream %q, want %s", i, str(md, "stream"), subjects.CallsStream())
		}
		if str(md, "account") != "FLEET" {
			t.Errorf("trigger %d: account %q, want FLEET (the account of the fleet's streams in nats-server.conf)", i, str(md, "account"))
		}
		host, port, err := net.SplitHostPort(str(md, "natsServerMonitoringEndpoint"))
		if err != nil || port != monitorPort || !strings.HasPrefix(host, "nats-headless.toolfleet.svc") {
			t.Errorf("trigger %d: natsServerMonitoringEndpoint %q, want nats-headless.toolfleet.svc...:%s", i, str(md, "natsServerMonitoringEndpoint"), monitorPort)
		}
		for _, k := range []string{"lagThreshold", "activationLagThreshold"} {
			if _, ok := get(md, k).(string); !ok {
				t.Errorf("trigger %d: %s %v, want a quoted number", i, k, get(md, k))
			}
		}
		got = append(got, str(md, "consumer"))
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("triggers watch consumers %v, the toolworkers pull from %v", got, want)
	}
}

// ---- the NATS Helm chart's values -------------------------------------------

var unquoted = regexp.MustCompile(`"<< (.+?) >>"`)

// renderMerge writes config.merge of the chart's values as the chart does:
// JSON, with "<< x >>" strings written unquoted.
func renderMerge(t testing.TB, values doc) string {
	t.Helper()
	merge, ok := get(values, "config", "merge").(map[string]any)
	if !ok {
		t.Fatal("values-nats.yaml: no config.merge")
	}
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:-1\n")
	for _, k := range keys(merge) {
		var j strings.Builder
		enc := json.NewEncoder(&j)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(merge[k]); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %s", k, unquoted.ReplaceAllString(j.String(), "$1"))
	}
	return b.String()
}

// TestHelmValuesMatchConf renders the chart values' server configuration,
// parses it with nats-server's parser, and wants the same users, passwords
// and permissions as nats-server.conf.
func TestHelmValuesMatchConf(t *testing.T) {
	values := helmValues(t)
	_, natsMinor := goModGo(t)
	if tag := str(values, "container", "image", "tag"); !strings.HasPrefix(tag, natsMinor) {
		t.Errorf("container.image.tag %q, want %s* (the version go.mod tests the config with)", tag, natsMinor)
	}
	for _, p := range [][]any{
		{"config", "jetstream", "enabled"},
		{"config", "jetstream", "fileStore", "enabled"},
		{"config", "jetstream", "fileStore", "pvc", "enabled"},
		{"config", "monitor", "enabled"},
	} {
		if get(values, p...) != true {
			t.Errorf("values-nats.yaml: %v is not true", p)
		}
	}

	_, helmRefs := helmSecretRefs(t, values)
	vars := confVars(t)
	if !reflect.DeepEqual(keys(helmRefs), keys(vars)) {
		t.Errorf("values-nats.yaml container.env %v, nats-server.conf reads %v", keys(helmRefs), keys(vars))
	}
	path := filepath.Join(t.TempDir(), "helm.conf")
	rendered := renderMerge(t, values)
	if err := os.WriteFile(path, []byte(rendered), 0o600); err != nil {
		t.Fatal(err)
	}
	helmUsers, helmOpts := confUsers(t, path, vars)
	confUsersVars, confOpts := confUsers(t, "nats-server.conf", vars)
	if !reflect.DeepEqual(helmUsers, confUsersVars) {
		t.Errorf("users and password variables: values %v, conf %v", helmUsers, confUsersVars)
	}
	if helmOpts.MaxPayload != confOpts.MaxPayload {
		t.Errorf("max_payload: values %d, conf %d", helmOpts.MaxPayload, confOpts.MaxPayload)
	}
	perms := func(o *server.Options) map[string]*server.Permissions {
		out := map[string]*server.Permissions{}
		for _, u := range o.Users {
			out[u.Username] = u.Permissions
		}
		return out
	}
	if h, c := perms(helmOpts), perms(confOpts); !reflect.DeepEqual(h, c) {
		t.Errorf("values-nats.yaml config.merge.accounts differs from nats-server.conf; replace its users with:\n%s", usersYAML(confOpts))
	}
	accountOf := func(o *server.Options) map[string]string {
		out := map[string]string{}
		for _, u := range o.Users {
			if u.Account != nil {
				out[u.Username] = u.Account.Name
			}
		}
		return out
	}
	if h, c := accountOf(helmOpts), accountOf(confOpts); !reflect.DeepEqual(h, c) || helmOpts.SystemAccount != confOpts.SystemAccount {
		t.Errorf("accounts: values %v (system %q), conf %v (system %q)", h, helmOpts.SystemAccount, c, confOpts.SystemAccount)
	}
	helmOpts.JetStream = true // config.jetstream.enabled, checked above
	helmSrv, confSrv := startOpts(t, helmOpts), startOpts(t, confOpts)
	for _, name := range slices.Compact(slices.Sorted(maps.Values(accountOf(confOpts)))) {
		he, hi := accountReport(t, helmSrv, name)
		ce, ci := accountReport(t, confSrv, name)
		same(t, "values-nats.yaml account "+name, "exports", he, ce)
		same(t, "values-nats.yaml account "+name, "imports", hi, ci)
	}
}

// usersYAML prints the users of o as values-nats.yaml spells them.
func usersYAML(o *server.Options) string {
	var b strings.Builder
	lst := func(name string, l []string) {
		if len(l) == 0 {
			return
		}
		fmt.Fprintf(&b, "            %s:\n", name)
		for _, s := range l {
			fmt.Fprintf(&b, "              - %q\n", s)
		}
	}
	for _, u := range o.Users {
		v := strings.TrimPrefix(u.Password, "tf-value-of-")
		fmt.Fprintf(&b, "      - user: %s\n        password: << $%s >>\n        permissions:\n", u.Username, v)
		for _, side := range []struct {
			name string
			p    *server.SubjectPermission
		}{{"publish", u.Permissions.Publish}, {"subscribe", u.Permissions.Subscribe}} {
			if side.p == nil {
				continue
			}
			fmt.Fprintf(&b, "          %s:\n", side.name)
			lst("allow", side.p.Allow)
			lst("deny", side.p.Deny)
		}
		if r := u.Permissions.Response; r != nil {
			if r.MaxMsgs == server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS && r.Expires == server.DEFAULT_ALLOW_RESPONSE_EXPIRATION {
				fmt.Fprintf(&b, "          allow_responses: true\n")
			} else {
				fmt.Fprintf(&b, "          allow_responses:\n            max: %d\n            expires: %q\n", r.MaxMsgs, r.Expires)
			}
		}
	}
	return b.String()
}

// clusterConfOpts parses cluster/nats-server.conf as nats-server does, with
// the environment it documents.
func clusterConfOpts(t *testing.T) *server.Options {
	t.Helper()
	for v := range confVars(t) {
		t.Setenv(v, "tf-value-of-"+v)
	}
	t.Setenv("TOOLFLEET_SERVER_NAME", "toolfleet-1")
	t.Setenv("TOOLFLEET_ROUTE_PASSWORD", "tf-route")
	t.Setenv("TOOLFLEET_ROUTES", "[nats-route://route:tf-route@nats-1:6222, nats-route://route:tf-route@nats-2:6222, nats-route://route:tf-route@nats-3:6222]")
	o, err := server.ProcessConfigFile(clusterConf)
	if err != nil {
		t.Fatalf("%s: %v", clusterConf, err)
	}
	return o
}

// TestKubernetesCluster: the chart's values make the NATS cluster of
// cluster/nats-server.conf — three JetStream nodes in domain hub, spread
// over Kubernetes nodes, accepting leaf nodes — the provision Job gives
// every stream as many replicas as the cluster has nodes, and KEDA reads
// each tool's consumer through the headless service, from which it finds
// the node leading the consumer.
func TestKubernetesCluster(t *testing.T) {
	values := helmValues(t)
	conf := clusterConfOpts(t)
	replicas, _ := get(values, "config", "cluster", "replicas").(int)
	if get(values, "config", "cluster", "enabled") != true || replicas != 3 || len(conf.Routes) != replicas {
		t.Errorf("values-nats.yaml: cluster enabled %v with %d replicas; want a cluster of %d, as %s routes", get(values, "config", "cluster", "enabled"), replicas, len(conf.Routes), clusterConf)
	}
	if d := str(values, "config", "jetstream", "merge", "domain"); d != conf.JetStreamDomain || d != "hub" {
		t.Errorf("values-nats.yaml: JetStream domain %q, %s has %q; the leaf user's permissions name $JS.hub.API", d, clusterConf, conf.JetStreamDomain)
	}
	if get(values, "config", "leafnodes", "enabled") != true || get(values, "config", "leafnodes", "port") != conf.LeafNode.Port {
		t.Errorf("values-nats.yaml: leafnodes %v on %v, want enabled on %d as in %s", get(values, "config", "leafnodes", "enabled"), get(values, "config", "leafnodes", "port"), conf.LeafNode.Port, clusterConf)
	}
	if get(values, "config", "merge", "accounts") == nil {
		t.Error("values-nats.yaml: no accounts")
	}
	spread := get(values, "podTemplate", "topologySpreadConstraints", "kubernetes.io/hostname")
	if str(spread, "whenUnsatisfiable") != "DoNotSchedule" || get(spread, "maxSkew") != 1 {
		t.Errorf("values-nats.yaml: podTemplate.topologySpreadConstraints[kubernetes.io/hostname] = %v, want one server per node (maxSkew 1, DoNotSchedule)", spread)
	}

	jobs := k8sObjects(t)["Job"]
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs under k8s/, want the provision Job", len(jobs))
	}
	c := get(jobs[0], "spec", "template", "spec", "containers", 0)
	job := invocation{where: "provision Job", binary: "coordinator", args: stringList(t, "provision Job args", get(c, "args"))}
	if job.subcommand() != "provision" {
		t.Fatalf("the Job runs coordinator %v, want provision", job.args)
	}
	if r, ok := job.flagValue("replicas"); !ok || r != fmt.Sprint(replicas) {
		t.Errorf("the provision Job passes --replicas %q, want %d (the cluster's nodes)", r, replicas)
	}

	// KEDA: every trigger on a tool consumer of the calls stream, read on
	// the headless service (whose pod names are the servers' names, by
	// which the scaler reaches the consumer's leader).
	subjects := protocol.Subjects{}
	for i, tr := range list(k8sObjects(t)["ScaledObject"][0], "spec", "triggers") {
		md := get(tr, "metadata")
		if str(md, "stream") != subjects.CallsStream() || !strings.HasPrefix(str(md, "consumer"), "tool_") {
			t.Errorf("trigger %d: %s/%s, want a tool consumer of %s", i, str(md, "stream"), str(md, "consumer"), subjects.CallsStream())
		}
		if !strings.HasPrefix(str(md, "natsServerMonitoringEndpoint"), "nats-headless.") {
			t.Errorf("trigger %d: %s, want the headless service", i, str(md, "natsServerMonitoringEndpoint"))
		}
	}
}
