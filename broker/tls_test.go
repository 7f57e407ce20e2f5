package broker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// The connections whose TLS the package sets up itself honour the URL's TLS parameters as
// the library's own connections do: a private CA, the name to verify.
func TestTheURLsTLSParametersReachTheConnectionsThePackageSecuresItself(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))

	uri, err := amqp.ParseURI("amqps://u:secret@broker.example.com:5671/v?cacertfile=" + ca + "&server_name_indication=other.example.com")
	require.NoError(t, err)
	cfg, err := tlsConfigOf(uri)
	require.NoError(t, err)
	require.Equal(t, "other.example.com", cfg.ServerName)
	require.NotNil(t, cfg.RootCAs, "the private CA is the root")

	uri, err = amqp.ParseURI("amqps://u:secret@broker.example.com/v")
	require.NoError(t, err)
	cfg, err = tlsConfigOf(uri)
	require.NoError(t, err)
	require.Equal(t, "broker.example.com", cfg.ServerName)
	require.Nil(t, cfg.RootCAs, "the system's roots")

	uri, err = amqp.ParseURI("amqps://u:secret@broker.example.com/v?cacertfile=" + filepath.Join(t.TempDir(), "missing.pem"))
	require.NoError(t, err)
	_, err = tlsConfigOf(uri)
	require.ErrorContains(t, err, "cacertfile")
	require.NotContains(t, err.Error(), "secret")
}

// A guarded amqps connection does its TLS beneath the guard and hands amqp091-go an amqp
// URL: every parameter the library reads from the URL must survive the change of scheme,
// or certificate login (auth_mechanism=external) turns into PLAIN with empty credentials
// on consumer connections alone. (No RabbitMQ with TLS and EXTERNAL runs beside the tests:
// this checks the URL each connection is built with.)
func TestTheGuardedAMQPSURLKeepsEveryParameter(t *testing.T) {
	for _, raw := range []string{
		"amqps://user:p%40ss%2Fw@broker.example.com/vh%2Fone?auth_mechanism=external&heartbeat=7&connection_timeout=2500&channel_max=99" +
			"&certfile=/c.pem&keyfile=/k.pem&cacertfile=/ca.pem&server_name_indication=sni.example.com",
		"amqps://broker.example.com:5999/?auth_mechanism=external&auth_mechanism=plain&heartbeat=0",
		"amqps://u:p@[::1]/",
	} {
		want, err := amqp.ParseURI(raw)
		require.NoError(t, err)
		got, err := amqp.ParseURI(plainSchemeURL(raw, want))
		require.NoError(t, err)
		want.Scheme = "amqp"
		require.Equal(t, want, got, raw)
	}
}

// The client that moves messages to -error refuses a login it does not speak before it
// dials, and dials within the URL's connection_timeout (rawamqp's tests hold the rest of
// its login).
func TestTheRawClientHonoursTheURLsAuthMechanismAndTimeout(t *testing.T) {
	_, err := dialRaw(t.Context(), Endpoint{URL: "amqp://u:pw@127.0.0.1:1/?auth_mechanism=amqplain"})
	require.ErrorContains(t, err, "auth_mechanism", "refused before it dials")

	uri, err := amqp.ParseURI("amqps://h/?connection_timeout=1500")
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, connectionTimeout(uri, rawConnTimeout))
}
