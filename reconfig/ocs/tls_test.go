package ocs_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/occl/occl/internal/testpki"
	"github.com/occl/occl/reconfig/ocs"
)

// serveTLS serves an emulated switch with TLS configuration cfg and token
// on loopback and returns its address.
func serveTLS(t *testing.T, cfg *tls.Config, token string) string {
	t.Helper()
	sw, err := ocs.NewEmulated(8, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ocs.NewServer(sw, ocs.ServerConfig{Token: token, GRPCOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background(), lis)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return lis.Addr().String()
}

// call dials addr with opts (no retries) and asks for the topology.
func call(t *testing.T, addr string, opts ...ocs.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := ocs.Dial(ctx, addr, append(opts, ocs.WithRetry(1, time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.GetTopology(ctx)
	return err
}

func clientTLS(t *testing.T, ca, cert, key string) ocs.Option {
	t.Helper()
	cfg, err := ocs.ClientTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return ocs.WithTLS(cfg)
}

// TestTLS: a controller serving TLS answers a client that trusts its
// authority and no other client: not one that trusts another authority or
// only the system's, and not a plaintext one, even with the right token.
func TestTLS(t *testing.T) {
	const token = "tls-token"
	p := testpki.New(t)
	cfg, err := ocs.ServerTLS(p.ServerCert, p.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg, token)

	if err := call(t, addr, ocs.WithToken(token), clientTLS(t, p.CA, "", "")); err != nil {
		t.Fatalf("client trusting the authority: %v", err)
	}
	if err := call(t, addr, ocs.WithToken("wrong"), clientTLS(t, p.CA, "", "")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("wrong token over TLS: %v, want Unauthenticated", err)
	}
	for name, opt := range map[string]ocs.Option{
		"another authority": clientTLS(t, p.OtherCA, "", ""),
		"system roots":      clientTLS(t, "", "", ""),
	} {
		err := call(t, addr, ocs.WithToken(token), opt)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("client trusting %s: %v, want Unavailable about the certificate", name, err)
		}
	}
	if err := call(t, addr, ocs.WithToken(token)); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext client with the token: %v, want Unavailable (no TLS handshake)", err)
	}

	t.Setenv(ocs.EnvToken, token)
	t.Setenv(ocs.EnvTLSCA, p.CA)
	opts, err := ocs.EnvOptions()
	if err != nil {
		t.Fatal(err)
	}
	if err := call(t, addr, opts...); err != nil {
		t.Errorf("client from %s and %s: %v", ocs.EnvToken, ocs.EnvTLSCA, err)
	}
	t.Setenv(ocs.EnvTLSCA, p.OtherCA)
	if opts, err = ocs.EnvOptions(); err != nil {
		t.Fatal(err)
	}
	if err := call(t, addr, opts...); status.Code(err) != codes.Unavailable {
		t.Errorf("client from the environment trusting another authority: %v, want Unavailable", err)
	}
	t.Setenv(ocs.EnvTLSCert, p.ClientCert)
	if _, err := ocs.EnvOptions(); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("client certificate without its key: %v", err)
	}
}

// TestMutualTLS: a controller given an authority for clients refuses a
// client without a certificate it signed.
func TestMutualTLS(t *testing.T) {
	p := testpki.New(t)
	cfg, err := ocs.ServerTLS(p.ServerCert, p.ServerKey, p.CA)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg, "")
	if err := call(t, addr, clientTLS(t, p.CA, "", "")); err == nil {
		t.Error("client without a certificate was served")
	}
	if err := call(t, addr, clientTLS(t, p.CA, p.ServerCert, p.ServerKey)); err == nil {
		t.Error("client presenting a server certificate was served")
	}
	if err := call(t, addr, clientTLS(t, p.CA, p.ClientCert, p.ClientKey)); err != nil {
		t.Errorf("client with a certificate signed by the authority: %v", err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	p := testpki.New(t)
	if _, err := ocs.ServerTLS(p.ServerCert, "", ""); err == nil {
		t.Error("ServerTLS without a key succeeded")
	}
	if _, err := ocs.ServerTLS(p.ServerCert, p.ClientKey, ""); err == nil {
		t.Error("ServerTLS with a key that does not match succeeded")
	}
	if _, err := ocs.ClientTLS(p.ServerKey, "", ""); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("ClientTLS with a key as authority: %v", err)
	}
}
