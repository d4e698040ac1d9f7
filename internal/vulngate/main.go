package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// message is one object of govulncheck's JSON stream; only findings
// matter here.
type message struct {
	Finding *finding `json:"finding"`
}

type finding struct {
	OSV          string  `json:"osv"`
	FixedVersion string  `json:"fixed_version"`
	Trace        []frame `json:"trace"`
}

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

// verdict is what the findings amount to, one line per vulnerability: the
// failures (a module we require, or a standard library function the code
// calls) and the warnings (standard library vulnerabilities no code of ours
// reaches).
type verdict struct {
	fail, warn []string
}

func judge(r io.Reader) (verdict, error) {
	dec := json.NewDecoder(r)
	type key struct{ osv, module string }
	called := map[key]bool{}
	fixed := map[key]string{}
	version := map[key]string{}
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return verdict{}, fmt.Errorf("vulngate: govulncheck output: %w", err)
		}
		if m.Finding == nil || len(m.Finding.Trace) == 0 {
			continue
		}
		top := m.Finding.Trace[0]
		k := key{m.Finding.OSV, top.Module}
		called[k] = called[k] || top.Function != ""
		fixed[k], version[k] = m.Finding.FixedVersion, top.Version
	}
	var v verdict
	for k := range fixed {
		how := "required, not called"
		if called[k] {
			how = "called"
		}
		line := fmt.Sprintf("%s in %s@%s (%s), fixed in %s", k.osv, k.module, version[k], how, fixed[k])
		if k.module == "stdlib" && !called[k] {
			v.warn = append(v.warn, line)
		} else {
			v.fail = append(v.fail, line)
		}
	}
	sort.Strings(v.fail)
	sort.Strings(v.warn)
	return v, nil
}

func main() {
	v, err := judge(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, w := range v.warn {
		fmt.Println("vulngate: warning: Go standard library:", w, "(build with that Go release)")
	}
	for _, f := range v.fail {
		fix := "(bump it in go.mod)"
		if strings.Contains(f, " in stdlib@") {
			fix = "(move GOTOOLCHAIN in .ci/run, the README and the Dockerfile to that Go release)"
		}
		fmt.Println("vulngate: FAIL:", f, fix)
	}
	fmt.Printf("vulngate: %d reachable or required vulnerabilities, %d unreachable in the standard library\n", len(v.fail), len(v.warn))
	if len(v.fail) > 0 {
		os.Exit(1)
	}
}
