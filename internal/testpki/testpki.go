// Package testpki makes throwaway X.509 certificates for tests of TLS: a
// self-signed certificate authority, a server certificate for 127.0.0.1,
// ::1 and localhost, and a client certificate, all signed by it, written
// as PEM files to a test's temporary directory.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI names the PEM files New wrote.
type PKI struct {
	CA                    string // the authority's certificate
	ServerCert, ServerKey string // for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // a client certificate
	// OtherCA is a second authority, which signed nothing here: verifying
	// against it must fail.
	OtherCA string
}

// New makes an authority and certificates signed by it (and an unrelated
// second authority) in t's temporary directory, with extra added to the
// server certificate's IP addresses.
func New(t testing.TB, extra ...net.IP) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		OtherCA: filepath.Join(dir, "other-ca.pem"),
	}
	caCert, caKey := authority(t, "occl test CA", p.CA)
	authority(t, "occl unrelated CA", p.OtherCA)
	ips := append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, extra...)
	leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "occl test server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, p.ServerCert, p.ServerKey)
	leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "occl test client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.ClientCert, p.ClientKey)
	return p
}

func serialNumber(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func key(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func authority(t testing.TB, name, certFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, k
}

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	k := key(t)
	tmpl.SerialNumber = serialNumber(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", kder)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
