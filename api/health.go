package api

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// healthz says the process serves HTTP; it checks nothing else, so that a database outage
// does not get the process restarted.
func (s *server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// newReadiness checks that Postgres answers a ping and Temporal's frontend reports
// healthy. The answer is reused for metrics.DefaultReadyMaxAge: /readyz needs no token, and in `serve`
// the ping shares the pool with ingestion, so a burst of probes must not become a burst
// of pings and health calls.
func newReadiness(deps Deps) *metrics.Readiness {
	return &metrics.Readiness{
		MaxAge: metrics.DefaultReadyMaxAge,
		Logger: deps.Logger,
		Now:    deps.Now,
		Checks: []metrics.Check{
			{Name: "postgres", Run: deps.Ping},
			{Name: "temporal", Run: func(ctx context.Context) error {
				_, err := deps.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
				return err
			}},
		},
	}
}

// readyz says whether requests can be served. Which dependency failed is named; why is
// only logged.
func (s *server) readyz(c *gin.Context) {
	answer := s.ready.Ready(c.Request.Context())
	if answer.Status != "ok" {
		c.JSON(http.StatusServiceUnavailable, answer)
		return
	}
	c.JSON(http.StatusOK, answer)
}
