package main

import (
	"context"
	"path"
	"sync"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// rpcCounter counts the Temporal RPCs a worker makes, by method: heartbeats are what a
// running window costs (billable Actions on Temporal Cloud, load on a self-hosted server).
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int64
}

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.calls[path.Base(method)]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// countingClient dials the namespace with every unary RPC counted.
func (s *figure) countingClient(ns string) (client.Client, *rpcCounter) {
	counter := &rpcCounter{calls: map[string]int64{}}
	c, err := client.Dial(client.Options{
		HostPort:  s.temporal.Address(),
		Namespace: ns,
		Logger:    testenv.QuietLogger{},
		ConnectionOptions: client.ConnectionOptions{
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(counter.intercept)},
		},
	})
	s.check(err, "dial temporal")
	s.Cleanup(c.Close)
	return c, counter
}
