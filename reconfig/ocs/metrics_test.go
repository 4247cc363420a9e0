package ocs_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/occl/occl/reconfig/ocs"
)

// scrape fetches url and returns its samples by name and labels, e.g.
// `grpc_server_handled_total{grpc_code="OK",...}`.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return samples
}

// sample returns the value of the one sample named name whose labels
// include every one of labels (`key="value"`); it fails the test if there
// is none or more than one.
func sample(t *testing.T, samples map[string]float64, name string, labels ...string) float64 {
	t.Helper()
	var found []string
	for k := range samples {
		n, ls, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(ls, l) {
				ok = false
			}
		}
		if ok {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("samples %s%v: found %q", name, labels, found)
	}
	return samples[found[0]]
}

// TestMetrics does Apply, failing and Drain calls and checks over HTTP that
// every metric moved by exactly what the calls did.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	sw := newSwitch(t, 8, 0)
	addr, _ := startServer(t, sw, ocs.ServerConfig{
		Token:     testToken,
		StatePath: filepath.Join(t.TempDir(), "ocs.state"),
		Registry:  reg,
	})
	c := dial(t, addr, ocs.WithToken(testToken))
	hs := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer hs.Close()
	ctx := ctxT(t)

	before := scrape(t, hs.URL)
	for name, want := range map[string]float64{
		ocs.MetricApplySeconds + "_count":      0,
		ocs.MetricSwitchingSeconds + "_count":  0,
		ocs.MetricCircuitsInstalled:            0,
		ocs.MetricPortsFailed:                  0,
		ocs.MetricPortsDrained:                 0,
		ocs.MetricStateWriteSeconds + "_count": 0,
	} {
		if got := sample(t, before, name); got != want {
			t.Errorf("before any call: %s = %v, want %v", name, got, want)
		}
	}

	// Two switching applies, one apply without a change, one on a failed
	// port, one invalid, one that fails in the switch and is rolled back,
	// one drain.
	if _, err := c.Apply(ctx, "a", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, "b", mustParse(t, "0-1,2-3")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, "c", mustParse(t, "0-1,2-3")); err != nil {
		t.Fatal(err)
	}
	if err := sw.FailPort(5); err != nil {
		t.Fatal(err)
	}
	_, err := c.Apply(ctx, "d", mustParse(t, "0-1,2-3,4-5"))
	wantCode(t, err, codes.FailedPrecondition, "apply on a failed port")
	_, err = c.Apply(ctx, "e", mustParse(t, "0-1,2-9"))
	wantCode(t, err, codes.InvalidArgument, "apply on a port the switch does not have")
	sw.FailNextApply(0)
	_, err = c.Apply(ctx, "f", mustParse(t, "0-1,2-3,6-7"))
	wantCode(t, err, codes.Aborted, "apply failing in the switch")
	if _, err := c.Drain(ctx, 4, false); err != nil {
		t.Fatal(err)
	}

	after := scrape(t, hs.URL)
	delta := func(name string, labels ...string) float64 {
		return sample(t, after, name, labels...) - sample(t, before, name, labels...)
	}
	for _, w := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{ocs.MetricApplySeconds + "_count", nil, 6},
		{ocs.MetricSwitchingSeconds + "_count", nil, 3},  // a, b and the failed f
		{ocs.MetricStateWriteSeconds + "_count", nil, 4}, // a, b, c, the drain
		{ocs.MetricApplySeconds + "_bucket", []string{`le="+Inf"`}, 6},
		{"grpc_server_handled_total", []string{`grpc_method="Apply"`, `grpc_code="OK"`}, 3},
		{"grpc_server_handled_total", []string{`grpc_method="Apply"`, `grpc_code="FailedPrecondition"`}, 1},
		{"grpc_server_handled_total", []string{`grpc_method="Apply"`, `grpc_code="InvalidArgument"`}, 1},
		{"grpc_server_handled_total", []string{`grpc_method="Apply"`, `grpc_code="Aborted"`}, 1},
		{"grpc_server_handled_total", []string{`grpc_method="Drain"`, `grpc_code="OK"`}, 1},
		{"grpc_server_handling_seconds_count", []string{`grpc_method="Apply"`}, 6},
	} {
		if got := delta(w.name, w.labels...); got != w.want {
			t.Errorf("%s%v moved by %v, want %v", w.name, w.labels, got, w.want)
		}
	}
	for name, want := range map[string]float64{
		ocs.MetricCircuitsInstalled: 2,
		ocs.MetricPortsFailed:       1,
		ocs.MetricPortsDrained:      1,
		ocs.MetricGeneration:        2,
	} {
		if got := sample(t, after, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if sum := sample(t, after, ocs.MetricSwitchingSeconds+"_sum"); sum <= 0 {
		t.Errorf("%s_sum = %v, want > 0", ocs.MetricSwitchingSeconds, sum)
	}
}

// TestMetricsRegistryShared: a second controller on the same registry is
// refused instead of mixing its metrics with the first's.
func TestMetricsRegistryShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	s1, err := ocs.NewServer(newSwitch(t, 4, 0), ocs.ServerConfig{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Stop(ctxT(t))
	if _, err := ocs.NewServer(newSwitch(t, 4, 0), ocs.ServerConfig{Registry: reg}); err == nil {
		t.Fatal("second server on the same registry accepted")
	}
}
