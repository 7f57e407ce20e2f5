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
