package httpapi

import (
	"context"
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 document of the API, served at GET
// /v1/openapi.json; TestOpenAPIMatchesRoutes holds it to the routes.
//
//go:embed openapi.json
var openAPIDocument []byte

func (s *Server) openAPI(_ context.Context, w http.ResponseWriter, _ *http.Request, _ *session) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
