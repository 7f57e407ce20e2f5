package broker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	amqp "github.com/rabbitmq/amqp091-go"
)

// tlsConfigOf is the TLS configuration an amqps URL asks for through the query parameters
// amqp091-go reads (cacertfile, certfile, keyfile, server_name_indication), for the
// connections whose TLS this package sets up itself: the guarded consumer connections and
// the raw client. Without them, the system's roots and the URL's host.
func tlsConfigOf(uri amqp.URI) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: cmp.Or(uri.ServerName, uri.Host), MinVersion: tls.VersionTLS12}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("read the broker URL's cacertfile: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, errors.New("the broker URL's cacertfile holds no PEM certificate")
		}
		cfg.RootCAs = roots
	}
	if uri.CertFile != "" || uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the broker URL's certfile and keyfile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// clientTLS runs the TLS handshake over conn, with the TLS settings of uri, within ctx;
// conn is closed when it fails.
func clientTLS(ctx context.Context, conn net.Conn, uri amqp.URI) (net.Conn, error) {
	cfg, err := tlsConfigOf(uri)
	if err != nil {
		conn.Close()
		return nil, err
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}
