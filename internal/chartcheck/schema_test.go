package chartcheck_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
)

// TestSchema: values agentd would refuse, or that cannot run a cluster,
// fail helm template and helm lint --strict with a message naming the
// value; good values render.
func TestSchema(t *testing.T) {
	helm := helmBinary(t)
	bad := []struct {
		name string
		set  []string
		want []string // substrings of the error
		// templateOnly: a check of the templates (a fail call), which helm
		// lint only logs; the others are the schema's.
		templateOnly bool
	}{
		{"two replicas", []string{"replicaCount=2"}, []string{"/replicaCount", "must be one of 1, 3, 5"}, false},
		{"four replicas", []string{"replicaCount=4"}, []string{"/replicaCount", "must be one of 1, 3, 5"}, false},
		{"no replicas", []string{"replicaCount=0"}, []string{"/replicaCount"}, false},
		{"sync sometimes", []string{"agentd.sync=sometimes"}, []string{"/agentd/sync", "'always', 'interval'"}, false},
		{"log format xml", []string{"agentd.logFormat=xml"}, []string{"/agentd/logFormat", "'json', 'text'"}, false},
		{"log level loud", []string{"agentd.logLevel=loud"}, []string{"/agentd/logLevel"}, false},
		{"size lots", []string{"agentd.jetstream.maxStore=lots"}, []string{"/agentd/jetstream/maxStore", "does not match pattern"}, false},
		{"size with a fraction", []string{"agentd.jetstream.maxMemory=1.5GiB"}, []string{"/agentd/jetstream/maxMemory"}, false},
		{"size as a number", []string{"agentd.jetstream.maxMemory=1024"}, []string{"/agentd/jetstream/maxMemory", "want string"}, false},
		{"zero memory", []string{"agentd.jetstream.maxMemory=0"}, []string{"/agentd/jetstream/maxMemory"}, false},
		{"zero store", []string{"agentd.jetstream.maxStore=0B"}, []string{"/agentd/jetstream/maxStore"}, false},
		{"duration soon", []string{"agentd.chunkMaxAge=soon"}, []string{"/agentd/chunkMaxAge"}, false},
		{"negative duration", []string{"agentd.idleTimeout=-1m"}, []string{"/agentd/idleTimeout"}, false},
		{"fractional lease TTL", []string{"agentd.leaseTtl=1.5s"}, []string{"/agentd/leaseTtl"}, false},
		{"lease TTL below 1s", []string{"agentd.leaseTtl=500ms"}, []string{"agentd.leaseTtl 500ms is below 1s"}, true},
		{"no partitions", []string{"agentd.partitions=0"}, []string{"/agentd/partitions"}, false},
		{"negative shards", []string{"agentd.shards=-1"}, []string{"/agentd/shards"}, false},
		{"shards not dividing partitions", []string{"agentd.shards=5"}, []string{"agentd.shards 5 does not divide agentd.partitions 64"}, true},
		{"partitions the default shards do not divide", []string{"agentd.partitions=12"}, []string{"agentd.shards 8 does not divide agentd.partitions 12", "set shards 0"}, true},
		{"volume below the store", []string{"persistence.size=5Gi"}, []string{"persistence.size 5Gi is smaller than agentd.jetstream.maxStore 10GiB"}, true},
		{"volume size lots", []string{"persistence.size=lots"}, []string{"/persistence/size"}, false},
		{"unknown value", []string{"agentd.synk=always"}, []string{"additional properties 'synk' not allowed"}, false},
		{"zone spread always", []string{"zoneSpread=always"}, []string{"/zoneSpread"}, false},
		{"external replicas 7", []string{"externalNats.replicas=7"}, []string{"/externalNats/replicas"}, false},
		{"service type", []string{"service.type=Headless"}, []string{"/service/type"}, false},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			set := append([]string{"auth.generateSecret=true"}, tc.set...)
			runs := [][]string{templateArgs(set...)}
			if !tc.templateOnly {
				runs = append(runs, append([]string{"lint", "--strict", chartDir}, setArgs(set)...))
			}
			for _, args := range runs {
				stdout, stderr, err := helmRun(helm, args...)
				if err == nil {
					t.Errorf("helm %s succeeded, want an error", strings.Join(args, " "))
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(stdout+stderr, w) {
						t.Errorf("helm %s: error lacks %q:\n%s%s", args[0], w, stdout, stderr)
					}
				}
			}
		})
	}
	good := [][]string{
		{"replicaCount=1"},
		{"replicaCount=5"},
		{"replicaCount=17"},
		{"agentd.sync=interval", "agentd.logFormat=text", "agentd.logLevel=debug"},
		{"agentd.jetstream.maxMemory=64M", "agentd.jetstream.maxStore=1TB", "persistence.size=2Ti"},
		{"agentd.jetstream.maxStore=10G", "persistence.size=11G"},
		{"agentd.chunkMaxAge=1h30m", "agentd.idleTimeout=300ms", "agentd.leaseTtl=1m30s", "agentd.shutdownTimeout=1500ms"},
		{"zoneSpread=hard", "podAntiAffinity=hard"},
		{"resources.requests.cpu=2", "resources.limits.memory=4Gi"},
		{"agentd.partitions=12", "agentd.shards=0"},
		{"agentd.partitions=12", "agentd.shards=4"},
		{"agentd.shards=1"},
	}
	for _, set := range good {
		args := templateArgs(append([]string{"auth.generateSecret=true"}, set...)...)
		if _, stderr, err := helmRun(helm, args...); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
	}
}

// TestSchemaPatterns: every size the schema's pattern admits, agentd's
// ParseSize parses, and every duration Go's ParseDuration does: the schema
// refuses at render what agentd would refuse at start, and admits nothing
// it would refuse.
func TestSchemaPatterns(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Agentd struct {
				Properties map[string]struct {
					Pattern    string
					Properties map[string]struct{ Pattern string }
				}
			}
		}
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	props := schema.Properties.Agentd.Properties
	sizes := []string{"1048576", "0", "0K", "64K", "64k", "64KB", "64KiB", "256MiB", "256mib", "10G", "10GB", "1T", "1TiB",
		"", "lots", "1.5G", "-1G", "1 G", "1P", "G", "1GiBs", "1iB"}
	for _, field := range []string{"maxMemory", "maxStore"} {
		re := regexp.MustCompile(props["jetstream"].Properties[field].Pattern)
		for _, s := range sizes {
			_, perr := agentd.ParseSize(s)
			if re.MatchString(s) && perr != nil {
				t.Errorf("agentd.jetstream.%s: the schema admits %q, which agentd refuses: %v", field, s, perr)
			}
		}
		for _, s := range []string{"256MiB", "10GiB", "64K", "1048576"} {
			if !re.MatchString(s) {
				t.Errorf("agentd.jetstream.%s: the schema refuses %q", field, s)
			}
		}
	}
	durations := []string{"0", "10s", "2m", "24h", "1h30m", "300ms", "1.5s", "10us", "10µs", "5ns",
		"", "soon", "-1m", "10", "1d", "1h 30m", "s"}
	for _, field := range []string{"chunkMaxAge", "idleTimeout", "shutdownTimeout", "leaseTtl"} {
		re := regexp.MustCompile(props[field].Pattern)
		if props[field].Pattern == "" {
			t.Fatalf("agentd.%s has no pattern", field)
		}
		for _, s := range durations {
			d, perr := time.ParseDuration(s)
			if re.MatchString(s) && (perr != nil || d < 0) {
				t.Errorf("agentd.%s: the schema admits %q, which Go refuses: %v", field, s, perr)
			}
		}
		for _, s := range []string{"10s", "2m", "1m30s"} {
			if !re.MatchString(s) {
				t.Errorf("agentd.%s: the schema refuses %q", field, s)
			}
		}
	}
}
