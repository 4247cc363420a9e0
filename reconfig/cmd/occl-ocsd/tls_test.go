package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/occl/occl/internal/testpki"
	"github.com/occl/occl/reconfig/ocs"
)

// TestRunTLS runs the daemon with -tls-cert and -tls-key: a client that
// trusts the authority is served; one trusting another authority and a
// plaintext one presenting the right token are not. With -tls-ca as well,
// a client must present a certificate the authority signed.
func TestRunTLS(t *testing.T) {
	t.Setenv("OCCL_OCS_TOKEN", token)
	p := testpki.New(t)
	start := func(t *testing.T, args ...string) string {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		var errb bytes.Buffer
		exit := make(chan int, 1)
		go func() {
			exit <- run(ctx, append([]string{"-ports", "8", "-delay", "0"}, args...), pw, &errb)
			pw.Close()
		}()
		t.Cleanup(func() {
			cancel()
			if code := <-exit; code != 0 {
				t.Errorf("exit %d; stderr %q", code, errb.String())
			}
		})
		return readAddr(t, pr)
	}
	topology := func(addr string, opts ...ocs.Option) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := ocs.Dial(ctx, addr, append(opts, ocs.WithRetry(1, time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.GetTopology(ctx)
		return err
	}
	clientTLS := func(ca, cert, key string) ocs.Option {
		cfg, err := ocs.ClientTLS(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return ocs.WithTLS(cfg)
	}

	t.Run("server", func(t *testing.T) {
		addr := start(t, "-tls-cert", p.ServerCert, "-tls-key", p.ServerKey)
		if err := topology(addr, ocs.WithToken(token), clientTLS(p.CA, "", "")); err != nil {
			t.Errorf("client trusting the authority: %v", err)
		}
		if err := topology(addr, ocs.WithToken(token), clientTLS(p.OtherCA, "", "")); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("client trusting another authority: %v, want Unavailable about the certificate", err)
		}
		if err := topology(addr, ocs.WithToken(token)); status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext client with the token: %v, want Unavailable", err)
		}
	})
	t.Run("mutual", func(t *testing.T) {
		addr := start(t, "-tls-cert", p.ServerCert, "-tls-key", p.ServerKey, "-tls-ca", p.CA)
		if err := topology(addr, ocs.WithToken(token), clientTLS(p.CA, "", "")); err == nil {
			t.Error("client without a certificate was served")
		}
		if err := topology(addr, ocs.WithToken(token), clientTLS(p.CA, p.ClientCert, p.ClientKey)); err != nil {
			t.Errorf("client with a certificate: %v", err)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for name, args := range map[string][]string{
			"cert without key": {"-tls-cert", p.ServerCert},
			"ca without cert":  {"-tls-ca", p.CA},
			"key mismatch":     {"-tls-cert", p.ServerCert, "-tls-key", p.ClientKey},
		} {
			var out, errb bytes.Buffer
			if code := run(context.Background(), args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-tls-cert") {
				t.Errorf("%s: exit %d, stderr %q", name, code, errb.String())
			}
		}
	})
}

// TestRunWarnsCleartextToken: a daemon with a token and no TLS warns when
// it listens beyond loopback, and not on loopback.
func TestRunWarnsCleartextToken(t *testing.T) {
	t.Setenv("OCCL_OCS_TOKEN", token)
	for _, tc := range []struct {
		listen string
		warn   bool
	}{{"0.0.0.0:0", true}, {"127.0.0.1:0", false}} {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		var errb bytes.Buffer
		exit := make(chan int, 1)
		go func() {
			exit <- run(ctx, []string{"-listen", tc.listen}, pw, &errb)
			pw.Close()
		}()
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil || !strings.Contains(line, "listening") {
			t.Fatalf("%s: first line %q, %v", tc.listen, line, err)
		}
		go io.Copy(io.Discard, pr)
		cancel()
		<-exit // errb is written before the daemon prints its address
		if got := strings.Contains(errb.String(), "clear text"); got != tc.warn {
			t.Errorf("-listen %s: warned %v, want %v (stderr %q)", tc.listen, got, tc.warn, errb.String())
		}
	}
}
