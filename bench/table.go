package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Machine describes where and how the run happened.
type Machine struct {
	GoVersion  string    `json:"goVersion"`
	OS         string    `json:"os"`
	Arch       string    `json:"arch"`
	CPU        string    `json:"cpu,omitempty"`
	NumCPU     int       `json:"numCPU"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	NATSServer string    `json:"natsServer"`
	Conn       string    `json:"conn"`
	Nodes      int       `json:"nodes"`
	Dir        string    `json:"dir"`
	Scale      float64   `json:"scale"`
	Started    time.Time `json:"started"`
}

func machine(dir string, tcp bool, scale float64, nodes int) Machine {
	conn := "in-process"
	if tcp {
		conn = "tcp loopback"
	}
	return Machine{
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		CPU:        cpuModel(),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NATSServer: server.VERSION,
		Conn:       conn,
		Nodes:      max(1, nodes),
		Dir:        dir,
		Scale:      scale,
		Started:    time.Now().UTC().Truncate(time.Second),
	}
}

// cpuModel reads the CPU model on Linux; empty elsewhere.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Report is everything a run prints.
type Report struct {
	Machine Machine  `json:"machine"`
	Rows    []Row    `json:"rows"`
	Errors  []string `json:"errors,omitempty"`
	Elapsed string   `json:"elapsed"`
}

// writeJSON writes r as indented JSON, with each row's ratio and verdict.
func writeJSON(w io.Writer, r Report) error {
	type row struct {
		Row
		Ratio float64 `json:"ratio"`
		Pass  *bool   `json:"pass,omitempty"`
	}
	out := struct {
		Report
		Rows []row `json:"rows"`
	}{Report: r}
	for _, x := range r.Rows {
		o := row{Row: x, Ratio: x.Ratio()}
		if pass, ok := x.Pass(); ok {
			o.Pass = &pass
		}
		out.Rows = append(out.Rows, o)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeTable prints the machine info and one aligned table of every row.
func writeTable(w io.Writer, r Report) error {
	m := r.Machine
	fmt.Fprintf(w, "go %s %s/%s, GOMAXPROCS %d, NumCPU %d, CPU %q\n", m.GoVersion, m.OS, m.Arch, m.GOMAXPROCS, m.NumCPU, m.CPU)
	topo := "R1"
	if m.Nodes > 1 {
		topo = fmt.Sprintf("%d-server cluster, R%d", m.Nodes, min(m.Nodes, 3))
	}
	fmt.Fprintf(w, "nats-server %s embedded (%s, %s, file store), store under %s, -n %g, started %s, took %s\n\n",
		m.NATSServer, m.Conn, topo, m.Dir, m.Scale, m.Started.Format(time.RFC3339), r.Elapsed)

	header := []string{"scenario", "sync", "figure", "value", "baseline", "baseline value", "ratio", "target"}
	right := []bool{false, false, false, true, false, true, true, false}
	cells := [][]string{header}
	for _, x := range r.Rows {
		target := ""
		if pass, ok := x.Pass(); ok {
			verdict := "MISS"
			if pass {
				verdict = "PASS"
			}
			target = fmt.Sprintf("%s >=%.2f (%s)", verdict, x.Target, x.TargetNote)
		}
		cells = append(cells, []string{
			x.Scenario, x.Sync, x.Figure, number(x.Value), x.Baseline, number(x.BaselineValue),
			fmt.Sprintf("%.2fx", x.Ratio()), target,
		})
	}
	width := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for n, row := range cells {
		for i, c := range row {
			if i > 0 {
				b.WriteString(" | ")
			}
			pad := strings.Repeat(" ", width[i]-len(c))
			if right[i] {
				b.WriteString(pad + c)
			} else if i < len(row)-1 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(c)
			}
		}
		b.WriteString("\n")
		if n == 0 {
			for i, wd := range width {
				if i > 0 {
					b.WriteString("-+-")
				}
				b.WriteString(strings.Repeat("-", wd))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nratio: ours/baseline for rates, baseline/ours for latencies (above 1: ours is better).\n")
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "ERROR %s\n", e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// number formats a figure: thousands grouped above 1000, three significant
// digits below.
func number(v float64) string {
	if v < 1000 {
		return strconv.FormatFloat(v, 'f', max(0, 2-int(magnitude(v))), 64)
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// magnitude is floor(log10(v)) for v >= 1, and 0 below.
func magnitude(v float64) int {
	n := 0
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}
