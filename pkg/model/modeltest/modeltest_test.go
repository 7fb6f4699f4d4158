package modeltest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/model/modeltest"
)

func TestServerWritesTheHTTPPartOfAReply(t *testing.T) {
	var srv *modeltest.Server[string, string]
	var reply modeltest.Reply
	srv = modeltest.Start[string, string](t, func(w http.ResponseWriter, r *http.Request) {
		if body, ok := modeltest.ReadBody(r); !ok || string(body) != "{}" {
			modeltest.WriteOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", "", "bad body")
			return
		}
		status, done := srv.Write(w, r, reply)
		if !done {
			modeltest.WriteOpenAIError(w, status, modeltest.OpenAIErrorType(status), "", "", "built")
		}
	}, nil, "")
	post := func() (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(srv.URL(), "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	reply = modeltest.Reply{Status: 429, Header: http.Header{"Retry-After": {"2"}}}
	resp, body := post()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || !strings.Contains(body, `"rate_limit_exceeded"`) {
		t.Fatalf("429 reply: status %d, Retry-After %q, body %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	reply = modeltest.Reply{Body: strings.Repeat("x", 2000), Chunked: true}
	if resp, body := post(); resp.StatusCode != 200 || len(body) != 2000 || resp.ContentLength != -1 {
		t.Fatalf("chunked reply: status %d, %d bytes, length %d", resp.StatusCode, len(body), resp.ContentLength)
	}
	reply = modeltest.Reply{Drop: true}
	if _, err := http.Post(srv.URL(), "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("a dropped connection answered")
	}
}

func TestLogAndSequence(t *testing.T) {
	var l modeltest.Log[string]
	a, b := "a", "b"
	l.Add(&a)
	l.Add(&b)
	l.Reject("no")
	if n0, n1 := l.Accept(), l.Accept(); n0 != 0 || n1 != 1 {
		t.Fatalf("Accept = %d, %d; want 0, 1", n0, n1)
	}
	if len(l.Requests()) != 2 || len(l.Rejected()) != 1 {
		t.Fatalf("Requests %d, Rejected %v; want 2 and [no]", len(l.Requests()), l.Rejected())
	}
	seq := modeltest.Sequence[string]("empty", "one", "two")
	if got := []string{seq(0, nil), seq(1, nil), seq(5, nil)}; got[0] != "one" || got[1] != "two" || got[2] != "two" {
		t.Fatalf("Sequence = %q", got)
	}
	if got := modeltest.Sequence[string]("empty")(3, nil); got != "empty" {
		t.Fatalf("empty Sequence = %q", got)
	}
	srv := modeltest.Start(t, nil, seq, "")
	req := "r"
	if n, rep := srv.Answer(&req); n != 0 || rep != "one" {
		t.Fatalf("Answer = %d, %q; want 0, one", n, rep)
	}
	if n, rep := srv.Answer(&req); n != 1 || rep != "two" {
		t.Fatalf("Answer = %d, %q; want 1, two", n, rep)
	}
}
