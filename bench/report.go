package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// Table writes results in nccl-tests' layout.
type Table struct {
	w       io.Writer
	n       int
	sumBW   float64
	wrong   int64
	explain bool
	latency bool
}

// NewTable returns a table writing to w.
func NewTable(w io.Writer) *Table { return &Table{w: w} }

// Explain adds, after nccl-tests' columns, the schedule run, the cost
// model's predicted time and measured/predicted (out of place).
func (t *Table) Explain() { t.explain = true }

// Latency adds, after nccl-tests' columns, the out-of-place variant's
// per-operation median, 99th percentile and maximum (Config.Latency).
func (t *Table) Latency() { t.latency = true }

// Header writes the column headings.
func (t *Table) Header() {
	fmt.Fprintf(t.w, "#\n")
	fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s  %31s  %31s\n", "", "", "", "", "", "out-of-place", "in-place")
	fmt.Fprintf(t.w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	if t.latency {
		fmt.Fprintf(t.w, "  %7s  %7s  %7s", "p50", "p99", "max")
	}
	if t.explain {
		fmt.Fprintf(t.w, "  %8s  %9s  %9s", "algo", "predicted", "meas/pred")
	}
	fmt.Fprintf(t.w, "\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	if t.latency {
		fmt.Fprintf(t.w, "  %7s  %7s  %7s", "(us)", "(us)", "(us)")
	}
	if t.explain {
		fmt.Fprintf(t.w, "  %8s  %9s  %9s", "", "(us)", "")
	}
	fmt.Fprintln(t.w)
}

// Row writes one result.
func (t *Table) Row(r Result, dtypeName string) {
	fmt.Fprintf(t.w, "%12d  %12d  %8s  %6s  %6d", r.Bytes, r.Count, dtypeName, r.RedOp, r.Root)
	t.variant(r.TimeUS, r.AlgBW, r.BusBW, r.Wrong)
	if r.InPlaceTimeUS > 0 {
		t.variant(r.InPlaceTimeUS, r.InPlaceAlgBW, r.InPlaceBusBW, r.InPlaceWrong)
	} else {
		fmt.Fprintf(t.w, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
	}
	if t.latency {
		if d := r.Latency; d != nil {
			fmt.Fprintf(t.w, "  %7s  %7s  %7s", formatTime(d.P50US), formatTime(d.P99US), formatTime(d.MaxUS))
		} else {
			fmt.Fprintf(t.w, "  %7s  %7s  %7s", "N/A", "N/A", "N/A")
		}
	}
	if t.explain {
		pred, ratio := "N/A", "N/A"
		if r.PredictedUS > 0 {
			pred = formatTime(r.PredictedUS)
			ratio = strconv.FormatFloat(r.TimeUS/r.PredictedUS, 'f', 2, 64)
		}
		fmt.Fprintf(t.w, "  %8s  %9s  %9s", r.Algo, pred, ratio)
	}
	fmt.Fprintln(t.w)
	t.n++
	t.sumBW += r.BusBW
	t.wrong += max(r.Wrong, 0) + max(r.InPlaceWrong, 0)
}

func (t *Table) variant(us, alg, bus float64, wrong int64) {
	w := "N/A"
	if wrong >= 0 {
		w = strconv.FormatInt(wrong, 10)
	}
	fmt.Fprintf(t.w, "  %7s  %6.2f  %6.2f  %6s", formatTime(us), alg, bus, w)
}

// formatTime keeps the time column seven characters wide.
func formatTime(us float64) string {
	switch {
	case us < 1e4:
		return strconv.FormatFloat(us, 'f', 2, 64)
	case us < 1e5:
		return strconv.FormatFloat(us, 'f', 1, 64)
	}
	return strconv.FormatFloat(us, 'f', 0, 64)
}

// Footer writes the summary lines and returns the number of wrong
// elements seen.
func (t *Table) Footer() int64 {
	status := "OK"
	if t.wrong > 0 {
		status = "FAILED"
	}
	fmt.Fprintf(t.w, "# Out of bounds values : %d %s\n", t.wrong, status)
	avg := 0.0
	if t.n > 0 {
		avg = t.sumBW / float64(t.n)
	}
	fmt.Fprintf(t.w, "# Avg bus bandwidth    : %g \n#\n", avg)
	return t.wrong
}

// WriteJSON writes one result as a line of JSON.
func WriteJSON(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
