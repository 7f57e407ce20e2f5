package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
)

// errorBody is every error answer: {"error": "what is wrong"}.
type errorBody struct {
	Error string `json:"error"`
}

// fail answers a JSON error and stops the handler chain. msg goes to the client as is, so
// it must never carry an error text from Temporal or the database.
func (s *server) fail(c *gin.Context, status int, msg string) {
	c.AbortWithStatusJSON(status, errorBody{Error: msg})
}

// failInternal logs err, which may name hosts, SQL or Temporal internals, and answers a
// generic msg.
func (s *server) failInternal(c *gin.Context, status int, msg string, err error) {
	s.log.ErrorContext(c.Request.Context(), msg, "method", c.Request.Method, "path", c.Request.URL.Path, "error", err)
	s.fail(c, status, msg)
}

// requestLog logs one line per request. Headers are left out: Authorization carries a
// token. The query string is left out too, as nothing here reads one.
func (s *server) requestLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	status := c.Writer.Status()
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	// Probes and scrapes come every few seconds; at info level they would drown the rest.
	if c.Request.URL.Path == "/healthz" || c.Request.URL.Path == "/readyz" {
		level = slog.LevelDebug
	}
	s.log.Log(c.Request.Context(), level, "http request",
		"method", c.Request.Method,
		"path", c.Request.URL.Path,
		"status", status,
		"duration", time.Since(start),
		"bytes", c.Writer.Size(),
	)
}

// recoverPanic turns a handler panic into a JSON 500. gin's own Recovery is not used
// because it prints the request headers, Authorization included, on some paths.
func (s *server) recoverPanic(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler { //nolint:errorlint // net/http compares it the same way
			panic(v)
		}
		s.log.ErrorContext(c.Request.Context(), "handler panicked",
			"method", c.Request.Method, "path", c.Request.URL.Path,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		if !c.Writer.Written() {
			s.fail(c, http.StatusInternalServerError, "internal error")
		}
	}()
	c.Next()
}

// limitBody caps the request body, so that a client cannot make the server read without end.
func (s *server) limitBody(c *gin.Context) {
	if c.Request.ContentLength > maxBodyBytes {
		s.fail(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxBodyBytes))
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes)
	c.Next()
}

// isTooLarge reports whether err comes from reading past limitBody's cap.
func isTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}
