// Package healthchecks pings a healthchecks.io-style check: <url>/start when a consumer
// window starts, <url> when it ends well, <url>/fail when it fails. Each window's pings
// carry a run id (?rid=), so that the four queues' windows running at once are told apart.
//
// Pings are best effort: they run in the background with a short timeout and never slow
// down, fail or retry a window. A check that stops receiving them reports late.
package healthchecks

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// pingTimeout bounds one ping.
const pingTimeout = 10 * time.Second

// maxBody is the most of a failure's kind sent with a /fail ping.
const maxBody = 256

// Kind names what went wrong in a few words ("broker unreachable", "database error
// 57014"). A /fail ping carries only the kind: the check lives at a third party, and an
// error's full text names hosts, vhosts and delivery ids.
type Kind string

// Pinger pings one check. A nil *Pinger, or one with an empty URL, pings nothing.
type Pinger struct {
	// URL is the check's ping URL, e.g. https://hc-ping.com/<uuid>, without a trailing
	// slash. It is a secret of sorts: it is never logged.
	URL string
	// Client sends the pings; nil means a client with pingTimeout.
	Client *http.Client
	// Logger gets a warning when a ping cannot be delivered; nil discards.
	Logger *slog.Logger
	// OnFailure, if set, is called when a ping cannot be delivered (a metric).
	OnFailure func()

	wg sync.WaitGroup
}

// Run is one window's pings, tied by their run id.
type Run struct {
	p   *Pinger
	rid string
}

// Start pings <url>/start and returns the run to end with Success or Fail.
func (p *Pinger) Start(ctx context.Context) *Run {
	if !p.enabled() {
		return nil
	}
	r := &Run{p: p, rid: newRunID()}
	p.ping(ctx, "/start", r.rid, "")
	return r
}

// Success pings <url> for a window that ended well.
func (r *Run) Success(ctx context.Context) {
	if r == nil {
		return
	}
	r.p.ping(ctx, "", r.rid, "")
}

// Fail pings <url>/fail with the failure's kind as the body.
func (r *Run) Fail(ctx context.Context, kind Kind) {
	if r == nil {
		return
	}
	r.p.ping(ctx, "/fail", r.rid, string(kind))
}

// Fail pings <url>/fail outside a run (a failure before a window could start).
func (p *Pinger) Fail(ctx context.Context, kind Kind) {
	if !p.enabled() {
		return
	}
	p.ping(ctx, "/fail", "", string(kind))
}

// Wait blocks until the pings sent so far are delivered or given up: before the check's
// server goes, say. The service does not wait for its last pings when it stops: they are
// best effort.
func (p *Pinger) Wait() {
	if p != nil {
		p.wg.Wait()
	}
}

func (p *Pinger) enabled() bool { return p != nil && p.URL != "" }

// ping sends one ping in the background; ctx only carries values, its end does not stop it.
func (p *Pinger) ping(ctx context.Context, suffix, rid, body string) {
	target := strings.TrimRight(p.URL, "/") + suffix
	if rid != "" {
		target += "?rid=" + url.QueryEscape(rid)
	}
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	ctx = context.WithoutCancel(ctx)
	p.wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, pingTimeout)
		defer cancel()
		if err := p.send(ctx, target, body); err != nil {
			if p.OnFailure != nil {
				p.OnFailure()
			}
			if p.Logger != nil {
				// The URL is left out: it is the check's credential.
				p.Logger.WarnContext(ctx, "healthchecks ping not delivered", "ping", pingName(suffix), "error", err)
			}
		}
	})
}

func (p *Pinger) send(ctx context.Context, target, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", scrub(err))
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: pingTimeout}
	}
	res, err := client.Do(req)
	if err != nil {
		return scrub(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	_ = res.Body.Close()
	if res.StatusCode >= 300 {
		return fmt.Errorf("answered %s", res.Status)
	}
	return nil
}

// scrub keeps the ping URL out of an error: net/http quotes it.
func scrub(err error) error {
	if ue, ok := err.(*url.Error); ok { //nolint:errorlint // only the outermost error quotes the URL
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

func pingName(suffix string) string {
	if suffix == "" {
		return "success"
	}
	return strings.TrimPrefix(suffix, "/")
}

// newRunID is a random UUID (version 4), the form healthchecks.io takes for rid.
func newRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
