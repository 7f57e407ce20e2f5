//go:build integration

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A secured Temporal cluster, as Temporal Cloud is with mTLS: the worker connects through
// a TLS listener that demands a client certificate from a throwaway CA, configured only
// with the SDK's envconfig variables. A certificate from another CA is refused at start
// with an error that says what failed, and no secret is printed.
func TestTheWorkerConnectsToTemporalOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "brokerswitch test CA")
	server := ca.issue(t, "localhost", true)
	client := ca.issue(t, "brokerswitch-worker", false)
	rogue := newCA(t, "someone else's CA").issue(t, "brokerswitch-worker", false)
	caPath := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.cert.Raw)
	clientCert, clientKey := client.write(t, dir, "client")
	rogueCert, rogueKey := rogue.write(t, dir, "rogue")
	addr := tlsFrontend(t, ca, server, temporalServer.Address())

	s := newStack(t, 1, nil)
	s.Env["TEMPORAL_ADDRESS"] = addr
	s.Env["TEMPORAL_TLS_SERVER_CA_CERT_PATH"] = caPath
	s.Env["TEMPORAL_TLS_SERVER_NAME"] = "localhost"
	s.Env["TEMPORAL_TLS_CLIENT_CERT_PATH"] = clientCert
	s.Env["TEMPORAL_TLS_CLIENT_KEY_PATH"] = clientKey
	p, log := s.producer(nil)
	s.startWorkerProcess("mtls")
	require.NoError(t, p.Publish(context.Background(), s.workload(mixed(5, 93))...))
	s.report(s.verify(log, time.Minute), "-")

	// The wrong certificate, and an API key that must never be printed.
	const apiKey = "tmprl-api-key-that-must-stay-secret"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := runWithEnv(ctx, s, rogueCert, rogueKey, apiKey)
	require.Error(t, err, "a worker with a certificate from another CA must not start:\n%s", out)
	require.Contains(t, out, "temporal at "+addr, "the error names the cluster:\n%s", out)
	require.Contains(t, out, "TEMPORAL_TLS", "the error names the settings to check:\n%s", out)
	require.NotContains(t, out, apiKey, "the API key was printed")
}

// runWithEnv runs `brokerswitch worker` with the stack's environment and another client
// certificate and an API key, and returns what it printed.
func runWithEnv(ctx context.Context, s *stack, cert, key, apiKey string) (string, error) {
	cmd := exec.CommandContext(ctx, workerBinary, "worker")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "TEMPORAL_TLS_CLIENT_CERT_PATH="+cert, "TEMPORAL_TLS_CLIENT_KEY_PATH="+key,
		"TEMPORAL_API_KEY="+apiKey)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tlsFrontend terminates mutual TLS on a loopback port and forwards the plain gRPC stream
// to the dev server, which has no TLS of its own. Each connection is closed when the test
// ends, and a client that has not finished its handshake within 10 s is dropped: a
// refused certificate is retried by the client, and no attempt may outlive the test.
func tlsFrontend(t *testing.T, ca *testCA, server *issued, target string) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{server.pair(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	keep := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			c.Close()
			return false
		}
		open[c] = struct{}{}
		return true
	}
	t.Cleanup(func() {
		cancel()
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := l.Accept()
			if err != nil || !keep(in) {
				return
			}
			go forwardTLS(ctx, in.(*tls.Conn), target, keep)
		}
	}()
	return l.Addr().String()
}

// forwardTLS completes a client's handshake within 10 s, then pipes it to target until
// either side ends; keep registers the target's connection for the test's cleanup.
func forwardTLS(ctx context.Context, in *tls.Conn, target string, keep func(net.Conn) bool) {
	defer in.Close()
	hs, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := in.HandshakeContext(hs)
	cancel()
	if err != nil {
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	out, err := d.DialContext(ctx, "tcp", target)
	if err != nil || !keep(out) {
		return
	}
	defer out.Close()
	go func() { _, _ = io.Copy(out, in); out.Close() }()
	_, _ = io.Copy(in, out)
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

type issued struct {
	certDER []byte
	key     *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) issue(t *testing.T, name string, server bool) *issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{name}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return &issued{certDER: der, key: key}
}

func (c *issued) pair(t *testing.T) tls.Certificate {
	t.Helper()
	return tls.Certificate{Certificate: [][]byte{c.certDER}, PrivateKey: c.key}
}

// write stores the certificate and its key as PEM files and returns their paths.
func (c *issued) write(t *testing.T, dir, name string) (certPath, keyPath string) {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(c.key)
	require.NoError(t, err)
	return writePEM(t, dir, name+".pem", "CERTIFICATE", c.certDER), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}
