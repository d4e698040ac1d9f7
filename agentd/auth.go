package agentd

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/forever-agents/forever/auth"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Files and directories of auth under the data dir.
const (
	// AdminCredsFile is the admin credential, written at the first start
	// with auth: a user of the service account, for agentd tenant.
	AdminCredsFile = "admin.creds"
	// AuthKeysSubdir holds the operator's keys (0700).
	AuthKeysSubdir = "auth"
	// JWTSubdir is the embedded server's account resolver directory.
	JWTSubdir = "jwt"
	// TenantsSubdir holds one data dir per tenant (its Pebble views).
	TenantsSubdir = "tenants"
)

// validateAuth refuses a non-loopback listen without Auth or Insecure,
// and what auth cannot run with yet.
func (c *Config) validateAuth() error {
	if c.Tenant != nil {
		return nil
	}
	if !c.Auth && !c.Insecure {
		for _, l := range []struct{ flag, addr string }{
			{"http", c.HTTPAddr},
			{"nats-listen", c.embeddedNATSListen()},
			{"cluster-listen", c.ClusterListen},
		} {
			if l.addr != "" && !isLoopback(l.addr) {
				return configErrorf(l.flag, "--%s %s is not a loopback address and auth is off: anyone who reaches it could command every agent; "+
					"pass --auth (tenants and credentials) or, to allow it without auth, --insecure", l.flag, l.addr)
			}
		}
	}
	if c.NATSCreds != "" && c.NATSURL == "" {
		return configErrorf("nats-creds", "--nats-creds needs --nats-url")
	}
	if c.OIDCIssuer != "" && (!c.Auth || c.OIDCAudience == "") {
		return configErrorf("oidc-issuer", "--oidc-issuer needs --auth and --oidc-audience")
	}
	if !c.Auth {
		return nil
	}
	why := "--auth"
	switch {
	case c.NATSCreds != "":
		return configErrorf("nats-creds", "--nats-creds with --auth: agentd connects with its own credential, from the operator's keys")
	case c.clustered() && c.AuthSecretFile == "":
		return configErrorf("auth-secret-file", "%s runs clustered only with --auth-secret-file: a secret file every node shares, "+
			"from which they derive the same operator keys (or pass --insecure and keep the ports private)", why)
	}
	return nil
}

func (c *Config) embeddedNATSListen() string {
	if c.NATSURL != "" {
		return ""
	}
	return c.NATSListen
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Operator is what auth adds to a daemon with Auth: the keys, the
// embedded server's trust and resolver, and agentd's own users. Package
// tenancy mints the tenants' accounts and users with it (Deps.Operator).
type Operator struct {
	Keys    *auth.Keys
	Self    *auth.User // agentd's user in the service account
	System  *auth.User // the system account's, for account claim updates
	Created bool       // first start with auth: admin.creds was written
}

// openOperator loads (or creates) the keys under the data dir, writes
// admin.creds when missing, and mints agentd's users.
func openOperator(cfg *Config) (*Operator, error) {
	path := filepath.Join(cfg.DataDir, AdminCredsFile)
	keys, created, err := operatorKeys(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.AuthSecretFile != "" {
		_, serr := os.Stat(path)
		created = errors.Is(serr, fs.ErrNotExist)
	}
	op := &Operator{Keys: keys, Created: created}
	if op.Self, err = keys.ServiceUser("agentd"); err != nil {
		return nil, err
	}
	if op.System, err = keys.SystemUser("agentd-system"); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		admin, err := keys.ServiceUser("admin")
		if err != nil {
			return nil, err
		}
		creds, err := admin.Creds()
		if err == nil {
			err = auth.WriteCreds(path, creds)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
		}
	}
	return op, nil
}

// operatorKeys derives the keys from --auth-secret-file, or loads (and
// first creates) them under <data>/auth; created is set for new ones.
func operatorKeys(cfg *Config) (keys *auth.Keys, created bool, err error) {
	if cfg.AuthSecretFile == "" {
		if keys, created, err = auth.LoadKeys(filepath.Join(cfg.DataDir, AuthKeysSubdir)); err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrDataDir, err)
		}
		return keys, created, nil
	}
	secret, err := os.ReadFile(cfg.AuthSecretFile)
	if err != nil {
		return nil, false, configErrorf("auth-secret-file", "auth secret file: %v", err)
	}
	if keys, err = auth.DeriveKeys(secret); err != nil {
		return nil, false, configErrorf("auth-secret-file", "auth secret file %s: %v", cfg.AuthSecretFile, err)
	}
	return keys, false, nil
}

// serverOptions puts the embedded server in operator mode: it trusts the
// operator, and resolves accounts from <data>/jwt, preloaded with the
// system and service accounts; tenant accounts arrive as claim updates.
func (op *Operator) serverOptions(dataDir string, opts *server.Options) error {
	oc, _, err := op.Keys.OperatorClaims()
	if err != nil {
		return err
	}
	res, err := server.NewDirAccResolver(filepath.Join(dataDir, JWTSubdir), 0, time.Minute, server.NoDelete)
	if err != nil {
		return fmt.Errorf("%w: account resolver: %w", ErrDataDir, err)
	}
	for _, acc := range []func() (string, error){op.Keys.SystemAccountJWT, op.Keys.ServiceAccountJWT} {
		tok, err := acc()
		if err != nil {
			return err
		}
		claims, err := jwt.DecodeAccountClaims(tok)
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		if err := res.Store(claims.Subject, tok); err != nil {
			return fmt.Errorf("%w: account resolver: %w", ErrDataDir, err)
		}
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = op.Keys.SystemPublicKey()
	opts.AccountResolver = res
	return nil
}

// ServerConfig returns the nats-server configuration that makes an
// external server (or cluster) trust the operator whose keys cfg names
// (--auth-secret-file, else <data>/auth): the operator JWT, the system
// account, a full account resolver storing under jwtDir, and the system
// and service accounts preloaded. agentd --auth --nats-url then creates
// tenants on that server as on its embedded one. Include it in each
// server's configuration, beside jetstream {} and the cluster block.
func ServerConfig(cfg Config, jwtDir string) (string, error) {
	keys, _, err := operatorKeys(&cfg)
	if err != nil {
		return "", err
	}
	_, opJWT, err := keys.OperatorClaims()
	if err != nil {
		return "", err
	}
	sysJWT, err := keys.SystemAccountJWT()
	if err != nil {
		return "", err
	}
	svcJWT, err := keys.ServiceAccountJWT()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`# Forever's operator (agentd auth server-config): agentd --auth --nats-url
# with the same keys creates tenants as NATS accounts on this server.
operator: %s
system_account: %s
resolver: {
  type: full
  dir: %q
  allow_delete: false
  interval: "1m"
}
resolver_preload: {
  %s: %s
  %s: %s
}
`, opJWT, keys.SystemPublicKey(), jwtDir,
		keys.SystemPublicKey(), sysJWT, keys.ServicePublicKey(), svcJWT), nil
}

// AdminCreds mints a new admin credential from the operator keys cfg names
// (--auth-secret-file, else <data>/auth): a user of agentd's service
// account, as <data>/admin.creds is. Whoever holds the keys or the secret
// can mint one; it is how the admin credential leaves a pod whose image has
// no shell (agentd auth admin-creds).
func AdminCreds(cfg Config) ([]byte, error) {
	keys, _, err := operatorKeys(&cfg)
	if err != nil {
		return nil, err
	}
	admin, err := keys.ServiceUser("admin")
	if err != nil {
		return nil, err
	}
	return admin.Creds()
}

// AdminToken mints the admin's HTTP token (auth.Keys.AdminToken) from the
// operator's keys of cfg (--data or --auth-secret-file), valid for ttl
// (0: auth.DefaultAdminTokenTTL): with it and an X-Forever-Tenant header,
// HTTP reaches any tenant as its admin (the console), and GET /v1/tenants
// lists them.
func AdminToken(cfg Config, ttl time.Duration) (string, time.Time, error) {
	keys, _, err := operatorKeys(&cfg)
	if err != nil {
		return "", time.Time{}, err
	}
	return keys.AdminToken(time.Now(), ttl)
}

// connOption is agentd's own credential for its connection.
func (op *Operator) connOption() nats.Option {
	return nats.UserJWTAndSeed(op.Self.JWT, string(op.Self.Seed))
}

// TenantLink is what a tenant's daemon needs from the daemon serving it
// (Config.Tenant).
type TenantLink struct {
	Name   string
	Server *server.Server // the embedded server, nil with --nats-url
	User   *auth.User     // agentd's user in the tenant's account
	// Budget returns the tenant's spend limits as its record now holds
	// them (tenant create's budget flags); nil: none.
	Budget func() auth.Budget
	// Replier is agentd's replier in the tenant's account
	// (auth.TenantReplierUser): the daemon answers its clients through a
	// connection of this user, which may publish only under _INBOX.
	// (Deps.Reply). Nil: answers go out on the daemon's connection.
	Replier *auth.User
	// Shards is the shard count a new log of the tenant is created with:
	// the serving node's (Daemon.Shards), so a tenant on a sharded
	// cluster gets its scale-out; 0 or 1, unsharded. It stands where
	// newClusterShards stands for a node: a tenant whose log exists (a
	// stored count, or the unsharded events stream) keeps its layout
	// (--shards, Config.Shards, stays 0 for a tenant's daemon).
	Shards int
}
