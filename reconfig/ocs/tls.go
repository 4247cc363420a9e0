package ocs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// ServerTLS returns the TLS configuration of a controller serving the
// certificate in certFile with the key in keyFile (PEM). With caFile, the
// controller also requires every client to present a certificate signed
// by an authority in caFile (mutual TLS). Give it to the server with
// ServerConfig.GRPCOptions: grpc.Creds(credentials.NewTLS(cfg)).
func ServerTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("ocs: TLS needs both a certificate and a key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("ocs: TLS certificate %s, key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS returns the TLS configuration of a client: it verifies the
// controller's certificate against the authorities in caFile (the
// system's if caFile is empty) and, with certFile and keyFile, presents
// that certificate (for a controller that requires client certificates).
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("ocs: TLS client certificate %s, key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("ocs: a TLS client certificate needs both the certificate and its key")
	}
	return cfg, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ocs: TLS authorities: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ocs: TLS authorities: no PEM certificate in %s", caFile)
	}
	return pool, nil
}

// WithTLS makes the client speak TLS with cfg (see ClientTLS). The bearer
// token is then only ever sent over TLS.
func WithTLS(cfg *tls.Config) Option {
	return WithTransportCredentials(credentials.NewTLS(cfg))
}

// Environment variables EnvOptions reads.
const (
	EnvToken   = "OCCL_OCS_TOKEN"    // bearer token
	EnvTLSCA   = "OCCL_OCS_TLS_CA"   // PEM authorities that sign the controller's certificate
	EnvTLSCert = "OCCL_OCS_TLS_CERT" // PEM client certificate, for mutual TLS
	EnvTLSKey  = "OCCL_OCS_TLS_KEY"  // its key
)

// EnvOptions returns the client options the environment sets: the bearer
// token from OCCL_OCS_TOKEN and, when any of OCCL_OCS_TLS_CA,
// OCCL_OCS_TLS_CERT and OCCL_OCS_TLS_KEY is set, TLS as ClientTLS makes it
// from them. Without them the client speaks plaintext, and the token
// travels in clear.
func EnvOptions() ([]Option, error) {
	var opts []Option
	if tok := os.Getenv(EnvToken); tok != "" {
		opts = append(opts, WithToken(tok))
	}
	ca, cert, key := os.Getenv(EnvTLSCA), os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey)
	if ca != "" || cert != "" || key != "" {
		cfg, err := ClientTLS(ca, cert, key)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithTLS(cfg))
	}
	return opts, nil
}
