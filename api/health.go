package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/client"
)

// readyTimeout bounds each readiness check, so that a hung dependency answers 503 before
// the orchestrator's probe gives up.
const readyTimeout = 3 * time.Second

// healthz says the process serves HTTP; it checks nothing else, so that a database outage
// does not get the process restarted.
func (s *server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// readinessAnswer is /readyz: each dependency is "ok" or "unavailable".
type readinessAnswer struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readyz says whether requests can be served: Postgres answers a ping and Temporal's
// frontend reports healthy. Which one failed is named; why is only logged.
func (s *server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	var postgresErr, temporalErr error
	var wg sync.WaitGroup
	wg.Go(func() { postgresErr = s.deps.Ping(ctx) })
	wg.Go(func() { _, temporalErr = s.deps.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}) })
	wg.Wait()

	answer := readinessAnswer{Status: "ok", Checks: map[string]string{"postgres": "ok", "temporal": "ok"}}
	for name, err := range map[string]error{"postgres": postgresErr, "temporal": temporalErr} {
		if err != nil {
			s.log.WarnContext(ctx, "readiness check failed", "dependency", name, "error", err)
			answer.Status = "unavailable"
			answer.Checks[name] = "unavailable"
		}
	}
	if answer.Status != "ok" {
		c.JSON(http.StatusServiceUnavailable, answer)
		return
	}
	c.JSON(http.StatusOK, answer)
}
