package auth

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzTenantRecord feeds stored registry records (the KV bucket holds JSON
// that agentd wrote, or anything a bug or an operator put there) through
// decoding and account JWT encoding: never a panic, and a record that
// encodes carries the account it names.
func FuzzTenantRecord(f *testing.F) {
	k, _, err := LoadKeys(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	t, _ := NewTenant("acme", time.Unix(0, 0))
	t.Clients = []string{"UABC"}
	t.RevokeAll(time.Unix(100, 0))
	t.Quota = Quota{Rate: 1.5, Burst: 3, Turns: 2, Agents: 10, Bytes: 1 << 20}
	seed, _ := json.Marshal(t)
	f.Add(seed)
	f.Add([]byte(`{"name":"x","account":"not a key","revoked":{"":-1},"quota":{"bytes":-5}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec Tenant
		if json.Unmarshal(data, &rec) != nil {
			return
		}
		tok, err := k.TenantAccountJWT(&rec, rec.Quota.Resolve(Quota{}))
		if err != nil {
			return
		}
		if tok == "" || strings.Count(tok, ".") != 2 {
			t.Fatalf("account jwt %q", tok)
		}
		_ = rec.HasToken("x")
		_, _ = rec.TokenCred("x")
		_ = rec.RevokeAll(time.Unix(200, 0))
		_ = CheckName(rec.Name)
	})
}
