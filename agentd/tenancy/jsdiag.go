package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
)

// Why a tenant's daemon does not start is seldom visible from inside: when
// the NATS server cannot reserve the JetStream storage of an account's
// limits, it logs "Error configuring jetstream for account" and leaves the
// account without a JetStream API, so every request of the tenant's daemon
// gets "no responders". The server still reports it to the system account,
// which agentd holds: jsDiagAfter into a wait, jsDiagnose asks it.
const (
	// jsDiagAfter is how long a tenant's daemon may be not ready before
	// the server is asked why.
	jsDiagAfter = 2 * time.Second
	// jsDiagEvery spaces the questions; two answers in a row that say the
	// account has no JetStream end the wait.
	jsDiagEvery = time.Second
)

// accountJSZSubject is the system account's request for one account's
// JetStream details; a server where the account is loaded without
// JetStream answers with an error saying so.
func accountJSZSubject(account string) string {
	return "$SYS.REQ.ACCOUNT." + account + ".JSZ"
}

// jsDiagnose returns an error that says why tenant t's account has no
// JetStream, when the server says it has none; nil when it has, when the
// server does not know the account yet, or when it cannot be asked.
func (ts *tenantSet) jsDiagnose(ctx context.Context, t *auth.Tenant) error {
	if ts.sys == nil || t == nil || t.Account == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	msg, err := ts.sys.RequestWithContext(ctx, accountJSZSubject(t.Account), nil)
	if err != nil {
		return nil
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(msg.Data, &resp) != nil || resp.Error == nil ||
		!strings.Contains(resp.Error.Description, "not jetstream enabled") {
		return nil
	}
	q := ts.parent.Config().TenantQuota(t.Quota)
	return fmt.Errorf("%w: tenant %s: the NATS server did not enable JetStream for the tenant's account: "+
		"it could not reserve the tenant's quota (max bytes %s, max memory %s; the server logs "+
		"\"Error configuring jetstream for account\"): give the server's JetStream more room "+
		"(--js-max-store, or max_file_store on an external server) or the tenant a smaller quota "+
		"(tenant create --max-bytes, --tenant-default-max-bytes)",
		host.ErrUnavailable, t.Name, limitString(q.Bytes), limitString(q.Memory))
}

// limitString prints a byte limit in MiB, 0 meaning none.
func limitString(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
