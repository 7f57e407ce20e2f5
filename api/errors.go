package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/brokerswitch/brokerswitch/errorqueue"
)

// ErrorQueues reads and moves the messages of the {q}-error queues; *errorqueue.Service
// has it.
type ErrorQueues interface {
	List(ctx context.Context, f errorqueue.Filter, limit int) (errorqueue.Listing, error)
	Show(ctx context.Context, id string, bodyBytes int) (errorqueue.Shown, error)
	Requeue(ctx context.Context, f errorqueue.Filter, opts errorqueue.RequeueOptions) (errorqueue.Run, error)
	Purge(ctx context.Context, f errorqueue.Filter) (errorqueue.Run, error)
}

// requeueRequest is POST /api/v1/errors/requeue: a filter and the run's options.
type requeueRequest struct {
	errorqueue.Filter
	errorqueue.RequeueOptions
}

// purgeRequest is POST /api/v1/errors/purge: a filter, and the operator's yes.
type purgeRequest struct {
	errorqueue.Filter
	// Confirm must be true: a purge cannot be undone.
	Confirm bool `json:"confirm"`
}

// getErrors lists the -error queues; the filter comes in the query string.
func (s *server) getErrors(c *gin.Context) {
	f, err := filterFromQuery(c)
	if err != nil {
		s.fail(c, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := intQuery(c, "limit")
	if err != nil {
		s.fail(c, http.StatusBadRequest, err.Error())
		return
	}
	l, err := s.deps.Errors.List(c.Request.Context(), f, limit)
	if s.failErrors(c, err) {
		return
	}
	c.JSON(http.StatusOK, l)
}

// getErrorMessage shows the messages with one delivery id.
func (s *server) getErrorMessage(c *gin.Context) {
	bodyBytes, err := intQuery(c, "bodyBytes")
	if err != nil {
		s.fail(c, http.StatusBadRequest, err.Error())
		return
	}
	shown, err := s.deps.Errors.Show(c.Request.Context(), c.Param("id"), bodyBytes)
	if s.failErrors(c, err) {
		return
	}
	c.JSON(http.StatusOK, shown)
}

// postRequeue requeues what the filter selects. The run lasts as long as its rate makes
// it: the write deadline is lifted, and a client that goes away stops it.
func (s *server) postRequeue(c *gin.Context) {
	var req requeueRequest
	if !s.bindStrict(c, &req) {
		return
	}
	if req.Rate < 0 {
		s.fail(c, http.StatusBadRequest, "rate must be 0 (no cap) or more messages per second")
		return
	}
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Time{})
	run, err := s.deps.Errors.Requeue(c.Request.Context(), req.Filter, req.RequeueOptions)
	s.answerRun(c, run, err)
}

// postPurge purges what the filter selects, once confirmed.
func (s *server) postPurge(c *gin.Context) {
	var req purgeRequest
	if !s.bindStrict(c, &req) {
		return
	}
	if !req.Confirm {
		s.fail(c, http.StatusBadRequest, `a purge cannot be undone: send "confirm": true (the CLI's --yes)`)
		return
	}
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Time{})
	run, err := s.deps.Errors.Purge(c.Request.Context(), req.Filter)
	s.answerRun(c, run, err)
}

func (s *server) answerRun(c *gin.Context, run errorqueue.Run, err error) {
	if !errors.Is(err, context.Canceled) && s.failErrors(c, err) {
		return
	}
	c.JSON(http.StatusOK, run)
}

// failErrors answers an error of the -error queues' service, if any: a bad filter is
// the client's (400), an id or a filter that matches nothing is 404, anything else is
// logged and answered 503.
func (s *server) failErrors(c *gin.Context, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, errorqueue.ErrBadFilter):
		s.fail(c, http.StatusBadRequest, err.Error())
	case errors.Is(err, errorqueue.ErrNotFound), errors.Is(err, errorqueue.ErrNothingMatched):
		s.fail(c, http.StatusNotFound, err.Error())
	default:
		s.failInternal(c, http.StatusServiceUnavailable, "the -error queues cannot be read now; retry later", err)
	}
	return true
}

// bindStrict reads a JSON body, refusing unknown fields.
func (s *server) bindStrict(c *gin.Context, v any) bool {
	dec := json.NewDecoder(c.Request.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if isTooLarge(err) {
			s.fail(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxBodyBytes))
			return false
		}
		s.fail(c, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// filterFromQuery reads a filter from the query string: broker, queue, event, reason,
// id, since and until (RFC 3339).
func filterFromQuery(c *gin.Context) (errorqueue.Filter, error) {
	f := errorqueue.Filter{Queue: c.Query("queue"), Event: c.Query("event"), Reason: c.Query("reason"), ID: c.Query("id")}
	if v, ok := c.GetQuery("broker"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return f, fmt.Errorf("broker %q: want a broker's index", v)
		}
		f.Broker = &n
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := c.Query(t.name); v != "" {
			at, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, fmt.Errorf("%s %q: want RFC 3339, like 2026-12-01T10:00:00Z", t.name, v)
			}
			*t.to = at
		}
	}
	return f, nil
}

// intQuery is a non-negative integer from the query string, 0 when absent.
func intQuery(c *gin.Context, name string) (int, error) {
	v, ok := c.GetQuery(name)
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q: want a number, 0 or more", name, v)
	}
	return n, nil
}

// requireErrors answers 503 when this process does not serve the -error queues.
func (s *server) requireErrors(c *gin.Context) {
	if s.deps.Errors == nil {
		s.fail(c, http.StatusServiceUnavailable, "this process does not serve the -error queues (run `brokerswitch api` or `serve`)")
		return
	}
	c.Next()
}
