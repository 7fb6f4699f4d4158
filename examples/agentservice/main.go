// Command agentservice is an example of a service that embeds the toolfleet
// runner and serves one agent over HTTP: POST /ask with {"question": "..."}
// runs the agent over the fleet's tools and answers {"answer": "...",
// "run_id": "..."}.
//
// The agent's model here is a scripted one (the bundled calculator demo, or
// --script FILE); a real service makes one of pkg/model's providers.
//
//	go run ./examples/agentservice --nats-url nats://127.0.0.1:4222 --addr :8080
//	curl -d '{"question":"What is (17 + 25) * 3?"}' localhost:8080/ask
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

// maxQuestionBytes bounds a request's body.
const maxQuestionBytes = 64 << 10

type askRequest struct {
	Question string `json:"question"`
}

type askResponse struct {
	Answer string `json:"answer"`
	RunID  string `json:"run_id"`
}

// agent serves one agent: a runner with its model and limits.
type agent struct{ r *runner.Runner }

func (a agent) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST a question", http.StatusMethodNotAllowed)
		return
	}
	var in askRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxQuestionBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Question == "" {
		http.Error(w, `want {"question": "..."}`, http.StatusBadRequest)
		return
	}
	res, err := a.r.Run(req.Context(), in.Question)
	if err != nil {
		// The error stays in the service's logs: it may name internals.
		http.Error(w, "the agent failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(askResponse{Answer: res.Answer, RunID: string(res.RunID)})
}

// newAgent returns the agent's handler on the fleet at nc.
func newAgent(ctx context.Context, nc *nats.Conn, model loop.Model) (agent, func(), error) {
	r, err := runner.New(ctx, nc, runner.Config{
		Model: model,
		Loop:  loop.Config{MaxRounds: 5, MaxRunDuration: time.Minute},
	})
	if err != nil {
		return agent{}, nil, err
	}
	return agent{r: r}, func() { r.Close() }, nil
}

func main() {
	url := flag.String("nats-url", nats.DefaultURL, "the fleet's NATS server")
	addr := flag.String("addr", ":8080", "HTTP listen address")
	script := flag.String("script", "", "scripted model `FILE` (default: the bundled calculator demo)")
	flag.Parse()
	if err := serve(*url, *addr, *script); err != nil {
		fmt.Fprintln(os.Stderr, "agentservice:", err)
		os.Exit(1)
	}
}

func serve(url, addr, script string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	model := scripted.Demo()
	if script != "" {
		m, err := scripted.Load(script)
		if err != nil {
			return err
		}
		model = m
	}
	nc, err := nats.Connect(url, nats.Name("example-agentservice"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	a, closeAgent, err := newAgent(ctx, nc, model)
	if err != nil {
		return err
	}
	defer closeAgent()
	srv := &http.Server{Addr: addr, Handler: http.NewServeMux(), ReadHeaderTimeout: 10 * time.Second}
	srv.Handler.(*http.ServeMux).Handle("/ask", a)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
