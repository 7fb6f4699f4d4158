package httpapi

import (
	"context"
	"mime"
	"net/http"
	"net/url"
)

// Login is the body of POST /v1/session: a NATS user and password, as
// JSON or as a form (application/x-www-form-urlencoded).
type Login struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// SessionInfo is what POST and GET /v1/session answer: who the session
// acts as, and the token its state-changing requests carry in the
// X-CSRF-Token header.
type SessionInfo struct {
	User      string `json:"user"`
	CSRFToken string `json:"csrf_token,omitempty"`
}

// login opens a session: the NATS connection as the user, and a cookie
// naming it.
func (s *Server) login(ctx context.Context, w http.ResponseWriter, r *http.Request, _ *session) {
	if e := sameOrigin(r); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	in, e := s.decodeLogin(w, r)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	ss, e := s.connect(ctx, r, randomID(), in.User, in.Password)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	ss.csrf = randomID()
	if _, ok := s.sessions.add(ss); !ok {
		ss.nc.Close()
		s.fail(w, r, errorf(http.StatusServiceUnavailable, CodeUnavailable, "too many sessions"), nil)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    ss.id,
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil || s.cfg.SecureCookies,
	})
	s.cfg.Logger.Info().Str(keyUser, ss.user).Msg("http api session opened")
	writeJSON(w, http.StatusCreated, SessionInfo{User: ss.user, CSRFToken: ss.csrf})
}

// decodeLogin reads a Login from a JSON body or a form body; never from
// the URL's query.
func (s *Server) decodeLogin(w http.ResponseWriter, r *http.Request) (Login, *apiError) {
	var in Login
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/x-www-form-urlencoded" {
		return in, decodeBody(w, r, min(s.cfg.MaxBodyBytes, 16<<10), &in)
	}
	if r.URL.RawQuery != "" {
		return in, errorf(http.StatusBadRequest, CodeBadRequest, "credentials are taken from the body only; the URL must have no query")
	}
	r.Body = http.MaxBytesReader(w, r.Body, min(s.cfg.MaxBodyBytes, 16<<10))
	if err := r.ParseForm(); err != nil {
		return in, errorf(http.StatusBadRequest, CodeBadRequest, "the form body cannot be read")
	}
	for k := range r.PostForm {
		if k != "user" && k != "password" {
			return in, badField(k, "unknown field "+url.QueryEscape(k))
		}
	}
	in.User, in.Password = r.PostForm.Get("user"), r.PostForm.Get("password")
	return in, nil
}

// whoami answers who the session acts as (and, for a cookie session, its
// CSRF token, which a page reads after a reload).
func (s *Server) whoami(_ context.Context, w http.ResponseWriter, _ *http.Request, ss *session) {
	writeJSON(w, http.StatusOK, SessionInfo{User: ss.user, CSRFToken: ss.csrf})
}

// logout ends the session and closes its NATS connection.
func (s *Server) logout(_ context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	if ss.csrf == "" {
		s.fail(w, r, errorf(http.StatusBadRequest, CodeBadRequest, "Basic authentication has no session to end"), nil)
		return
	}
	s.sessions.remove(ss.id)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || s.cfg.SecureCookies})
	w.WriteHeader(http.StatusNoContent)
}
