package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolfleet/toolfleet/internal/httpapi"
)

// TestOpenAPIMatchesRoutes: the served document is OpenAPI 3.1, names
// every route the server registers and no other, and the error answers
// of a request without a session and of an unknown route validate
// against its Error schema.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s, err := httpapi.New(httpapi.Config{Dial: func(context.Context, string, string, ...nats.Option) (*nats.Conn, error) {
		return nil, errors.New("no NATS in this test")
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				documented = append(documented, strings.ToUpper(m)+" "+p)
			}
		}
	}
	for _, r := range httpapi.Routes(s) {
		served = append(served, r[0]+" "+r[1])
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("documented routes\n%s\nserved routes\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}

	// every schema of the document compiles (JSON Schema 2020-12, as
	// OpenAPI 3.1 has it)
	var comps struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &comps); err != nil {
		t.Fatal(err)
	}
	for name := range comps.Components.Schemas {
		compileSchema(t, name)
	}
	schema := compileSchema(t, "Error")
	for _, path := range []string{"/v1/runs/x", "/v1/nowhere"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var body any
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(body); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
}

// compileSchema compiles the document's component schema name.
func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(httpapi.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("openapi.json#/components/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// validate checks v's JSON form against the document's schema name.
func validate(t *testing.T, name string, v any) {
	t.Helper()
	data, _ := json.Marshal(v)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := compileSchema(t, name).Validate(inst); err != nil {
		t.Fatalf("%s does not match the OpenAPI schema %s: %v", data, name, err)
	}
}
