package agentd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
)

// How a Config field is defaulted.
type fieldDefault int

const (
	// byDefaults: SetDefaults fills the zero field, and its doc says with
	// what.
	byDefaults fieldDefault = iota + 1
	// zeroMeans: SetDefaults leaves it zero, and zero means something the
	// field's doc states (another package's default, "no limit", the
	// provider's), decided where the field is used.
	zeroMeans
	// noDefault: zero is off, empty or unset; not a flag's default.
	noDefault
)

// configFields lists every Config field with how it is defaulted. A new
// field fails TestConfigFieldsListed until it is listed here, so that its
// default is decided in SetDefaults (or decided to be none).
var configFields = map[string]fieldDefault{
	"DataDir":               byDefaults,
	"PebbleFS":              noDefault,
	"NATSURL":               noDefault,
	"NATSListen":            byDefaults,
	"Sync":                  byDefaults,
	"HTTPAddr":              byDefaults,
	"JetStreamMaxMemory":    byDefaults,
	"JetStreamMaxStore":     byDefaults,
	"ChunkMaxAge":           byDefaults,
	"AgentEventsMax":        byDefaults,
	"AgentEventsMaxAge":     byDefaults,
	"MaxTurns":              byDefaults,
	"BlobThreshold":         zeroMeans, // 256 KiB, in chathost
	"BlobGrace":             zeroMeans, // 1h, in blob
	"ContextTokens":         zeroMeans, // the provider's
	"IdleTimeout":           byDefaults,
	"AgentVersion":          zeroMeans, // the binary's build
	"VersionPolicy":         zeroMeans, // continue
	"ScheduleTimeout":       byDefaults,
	"CompactEvents":         zeroMeans, // package compaction's
	"CompactBytes":          zeroMeans,
	"CompactIdleEvents":     zeroMeans,
	"CompactEvery":          zeroMeans,
	"MaxStreamConsumers":    zeroMeans, // the server's
	"Provider":              byDefaults,
	"Model":                 noDefault,
	"ProviderURL":           noDefault,
	"LocalRate":             zeroMeans, // 30 tokens/s
	"ModelLimit":            noDefault,
	"ModelTokenLimit":       noDefault,
	"LocalModelLimit":       noDefault,
	"Prices":                noDefault,
	"UserBudget":            noDefault,
	"ShutdownTimeout":       byDefaults,
	"LogLevel":              zeroMeans, // info
	"LogFormat":             byDefaults,
	"ServerName":            byDefaults,
	"ClusterName":           byDefaults, // with ClusterListen
	"ClusterListen":         noDefault,
	"Routes":                noDefault,
	"Replicas":              zeroMeans, // 3 clustered, 1 else, at Run
	"Partitions":            byDefaults,
	"Shards":                zeroMeans, // the count the cluster stored (unsharded for a new one)
	"AllViews":              noDefault, // owned views when sharded
	"PackChunks":            noDefault,
	"LeaseTTL":              byDefaults,
	"MCP":                   noDefault,
	"CORSOrigins":           noDefault,
	"AllowedHosts":          noDefault,
	"FrameAncestors":        noDefault,
	"TLSCert":               noDefault,
	"TLSKey":                noDefault,
	"TLSCA":                 noDefault,
	"NATSCreds":             noDefault,
	"Auth":                  noDefault,
	"AuthSecretFile":        noDefault,
	"Insecure":              noDefault,
	"OIDCIssuer":            noDefault,
	"OIDCAudience":          noDefault,
	"OIDCTenantClaim":       zeroMeans, // "tenant"
	"Tenant":                noDefault,
	"Quota":                 noDefault,
	"HTTPReadHeaderTimeout": byDefaults,
	"HTTPBodyTimeout":       byDefaults,
	"HTTPIdleTimeout":       byDefaults,
	"HTTPMaxConns":          byDefaults,
	"MetricsListen":         zeroMeans, // DefaultAuthMetricsListen with Auth
	"Pprof":                 noDefault,
	"EncryptionKeyFile":     noDefault,
	"EncryptionCipher":      zeroMeans, // chacha
	"TenantDefaults":        byDefaults,
	"OIDCRoleClaim":         noDefault,
	"AuditMaxAge":           byDefaults,
	"AuditMaxBytes":         zeroMeans, // AuditBytes
	"AuditCommand":          noDefault,
	"CommandActor":          noDefault,
	"TracerProvider":        noDefault,
	"TraceContent":          noDefault,
	"TrustTraceparent":      noDefault,
	"Logger":                byDefaults,
	"Registerer":            zeroMeans, // New makes a registry
	"Gatherer":              zeroMeans,
}

// TestConfigFieldsListed: every Config field is in configFields, and
// the fields it says SetDefaults fills are the fields SetDefaults fills.
func TestConfigFieldsListed(t *testing.T) {
	typ := reflect.TypeFor[Config]()
	seen := map[string]bool{}
	for f := range typ.Fields() {
		seen[f.Name] = true
		if _, ok := configFields[f.Name]; !ok {
			t.Errorf("Config.%s is not in configFields: set its default in SetDefaults (config.go) and list it byDefaults, or list it zeroMeans or noDefault", f.Name)
		}
	}
	for name := range configFields {
		if !seen[name] {
			t.Errorf("configFields lists %s, which Config no longer has", name)
		}
	}

	// ClusterListen set, so that ClusterName takes its default.
	c := Config{ClusterListen: "127.0.0.1:0"}
	c.SetDefaults()
	v := reflect.ValueOf(c)
	for f := range typ.Fields() {
		if f.Name == "ClusterListen" {
			continue
		}
		if f.Name == "ServerName" {
			if _, err := os.Hostname(); err != nil {
				continue // its default is the host name
			}
		}
		set := !v.FieldByIndex(f.Index).IsZero()
		switch want := configFields[f.Name]; {
		case want == byDefaults && !set:
			t.Errorf("Config.%s is listed byDefaults, but SetDefaults leaves it zero", f.Name)
		case want != byDefaults && want != 0 && set:
			t.Errorf("SetDefaults sets Config.%s: list it byDefaults", f.Name)
		}
	}
}

// TestConfigDefaultsDocumented: the doc of each field SetDefaults fills
// says its default.
func TestConfigDefaultsDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		doc := ""
		for _, fld := range ts.Type.(*ast.StructType).Fields.List {
			// A field without a doc of its own is one of a group the
			// doc above names ("AgentEventsMax and AgentEventsMaxAge").
			if fld.Doc != nil {
				doc = fld.Doc.Text()
			}
			for _, name := range fld.Names {
				docs[name.Name] = doc
			}
		}
		return false
	})
	if len(docs) == 0 {
		t.Fatal("no Config struct in config.go")
	}
	for name, how := range configFields {
		if how == byDefaults && !strings.Contains(strings.ToLower(docs[name]), "default") {
			t.Errorf("Config.%s's doc does not say its default", name)
		}
	}
}
