package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

var metricsLine = regexp.MustCompile(`^occl-ocsd metrics on (127\.0\.0\.1:[0-9]+)$`)

// TestRunMetrics runs the daemon with -metrics-addr, applies through a
// client and scrapes http://ADDR/metrics.
func TestRunMetrics(t *testing.T) {
	t.Setenv("OCCL_OCS_TOKEN", token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"-ports", "8", "-delay", "1ms", "-metrics-addr", "127.0.0.1:0"}, pw, &errb)
		pw.Close()
	}()
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(re *regexp.Regexp) string {
		t.Helper()
		select {
		case line := <-lines:
			m := re.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("line %q, want %q (stderr %q)", line, re, errb.String())
			}
			return m[1]
		case <-time.After(20 * time.Second):
			t.Fatal("the daemon printed no address")
			return ""
		}
	}
	addr := next(listenLine)
	maddr := next(metricsLine)
	c, err := ocs.Dial(ctx, addr, ocs.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Apply(ctx, ocs.NewRequestID(), []topo.Circuit{{A: 0, B: 7}, {A: 1, B: 2}}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %s", err, resp.Status)
	}
	text := string(body)
	for _, want := range []string{
		"\noccl_ocsd_circuits_installed 2\n",
		"\noccl_ocsd_apply_seconds_count 1\n",
		"\noccl_ocsd_switching_seconds_count 1\n",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Apply",grpc_service="occl.ocs.v1.OCS",grpc_type="unary"} 1` + "\n",
		"\ngo_goroutines ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d after cancel; stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := http.Get("http://" + maddr + "/metrics"); err == nil {
		t.Error("metrics still served after the daemon stopped")
	}
}
