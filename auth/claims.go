package auth

import (
	"fmt"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Account names, as the server shows them in logs and monitoring.
const (
	OperatorName       = "forever"
	SystemAccountName  = "SYS"
	ServiceAccountName = "FOREVER"
)

// OperatorClaims returns the operator the server trusts.
func (k *Keys) OperatorClaims() (*jwt.OperatorClaims, string, error) {
	oc := jwt.NewOperatorClaims(pub(k.Operator))
	oc.Name = OperatorName
	oc.SystemAccount = pub(k.System)
	tok, err := oc.Encode(k.Operator)
	if err != nil {
		return nil, "", fmt.Errorf("auth: operator jwt: %w", err)
	}
	return oc, tok, nil
}

// SystemPublicKey is the system account's public key.
func (k *Keys) SystemPublicKey() string { return pub(k.System) }

// ServicePublicKey is the service account's public key.
func (k *Keys) ServicePublicKey() string { return pub(k.Service) }

// SystemAccountJWT returns the system account's JWT.
func (k *Keys) SystemAccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(pub(k.System))
	ac.Name = SystemAccountName
	return k.encodeAccount(ac)
}

// ServiceAccountJWT returns the service account's JWT: JetStream without
// limits (the node's own --js-max-* bound it).
func (k *Keys) ServiceAccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(pub(k.Service))
	ac.Name = ServiceAccountName
	ac.Limits.JetStreamLimits = unlimitedJetStream()
	return k.encodeAccount(ac)
}

// TenantAccountJWT returns the account JWT of t: its limits from q, the
// quota enforced (t.Quota resolved with the node's defaults: 0 is no
// limit), the tenant signing key, and t's revocations. A disabled tenant's
// account takes no connection: the server closes those it has.
// A record whose name or account key is invalid is an error.
func (k *Keys) TenantAccountJWT(t *Tenant, q Quota) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	ac := jwt.NewAccountClaims(t.Account)
	ac.Name = t.Name
	ac.SigningKeys.Add(pub(k.Signer))
	js := unlimitedJetStream()
	js.DiskStorage = limit(q.StoreLimit())
	js.MemoryStorage = limit(q.Memory)
	js.Streams = limit(q.Streams)
	js.Consumer = limit(q.Consumers)
	ac.Limits.JetStreamLimits = js
	ac.Limits.Conn = limit(q.Conns)
	if t.Disabled {
		ac.Limits.Conn = 0
	}
	if len(t.Revoked) > 0 {
		ac.Revocations = make(jwt.RevocationList, len(t.Revoked))
	}
	for user, at := range t.Revoked {
		ac.Revocations.Revoke(user, unixTime(at))
	}
	return k.encodeAccount(ac)
}

// limit is a resolved quota field as a JWT limit: 0 is no limit.
func limit(v int64) int64 {
	if v <= 0 {
		return jwt.NoLimit
	}
	return v
}

func unlimitedJetStream() jwt.JetStreamLimits {
	return jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
}

func (k *Keys) encodeAccount(ac *jwt.AccountClaims) (string, error) {
	tok, err := ac.Encode(k.Operator)
	if err != nil {
		return "", fmt.Errorf("auth: account %s jwt: %w", ac.Name, err)
	}
	return tok, nil
}

// User is a minted user credential.
type User struct {
	PublicKey string
	JWT       string
	Seed      []byte
}

// Creds is the user's creds file, as nats.UserCredentials reads it.
func (u *User) Creds() ([]byte, error) {
	b, err := jwt.FormatUserConfig(u.JWT, u.Seed)
	if err != nil {
		return nil, fmt.Errorf("auth: creds: %w", err)
	}
	return b, nil
}

// ServiceUser mints a user of the service account without limits: agentd's
// own connection and the admin credential.
func (k *Keys) ServiceUser(name string) (*User, error) {
	return mintUser(name, k.Service, "", nil)
}

// SystemUser mints a user of the system account, for claim updates.
func (k *Keys) SystemUser(name string) (*User, error) {
	return mintUser(name, k.System, "", nil)
}

// TenantRuntimeUser mints agentd's own user in t's account, without limits.
func (k *Keys) TenantRuntimeUser(t *Tenant) (*User, error) {
	return mintUser("agentd", k.Signer, t.Account, nil)
}

// TenantReplierUser mints agentd's replier in t's account: a user that
// may only publish under InboxPrefix and subscribe to nothing
// (ReplierPermissions). A tenant's daemon sends every answer to a client
// through a connection of this user (agentd.Deps.Reply).
func (k *Keys) TenantReplierUser(t *Tenant) (*User, error) {
	return mintUser("agentd-replier", k.Signer, t.Account, ReplierPermissions())
}

// ReplierPermissions are agentd's replier's: publish only under
// InboxPrefix (_INBOX.>), subscribe to nothing. NATS does not check a
// request's reply subject against its sender's permissions; it checks
// what the answering user may publish. An answer sent as this user can
// therefore never land in a stream or a KV bucket of the account (an
// event, a chunk, a lease, an epoch), whatever reply subject a client set
// and whether or not agentd's own check (CheckReply) caught it: the
// server refuses the publish.
func ReplierPermissions() *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(InboxPrefix + ">")
	p.Sub.Deny.Add(">")
	return p
}

// TenantClientUser mints the NATS user of t's credential c, limited by
// ClientPermissions(c.Role), expiring at c.Expires (the
// server closes its connections then), with q's (resolved) subscriptions
// and payload limits per connection.
func (k *Keys) TenantClientUser(t *Tenant, c Credential, q Quota) (*User, error) {
	if !c.Role.Valid() {
		return nil, fmt.Errorf("%w: role %q", ErrInvalidCredential, c.Role)
	}
	return mintUser(t.Name+"/"+c.Name, k.Signer, t.Account, ClientPermissions(c.Role), func(uc *jwt.UserClaims) {
		uc.Expires = c.Expires
		uc.Limits.Subs = limit(q.Subs)
		uc.Limits.Payload = limit(q.Payload)
		uc.Tags.Add("role:" + string(c.Role))
	})
}

func mintUser(name string, signer nkeys.KeyPair, issuerAccount string, perms *jwt.Permissions, opts ...func(*jwt.UserClaims)) (*User, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("auth: user key: %w", err)
	}
	uc := jwt.NewUserClaims(pub(ukp))
	uc.Name = name
	uc.IssuerAccount = issuerAccount
	if perms != nil {
		uc.Permissions = *perms
	}
	for _, o := range opts {
		o(uc)
	}
	tok, err := uc.Encode(signer)
	if err != nil {
		return nil, fmt.Errorf("auth: user %s jwt: %w", name, err)
	}
	seed, _ := ukp.Seed()
	return &User{PublicKey: pub(ukp), JWT: tok, Seed: seed}, nil
}

// ClientAPIPrefix is where a tenant's client sends JetStream API requests
// (jetstream.NewWithAPIPrefix, eventlog.Config.APIPrefix): agentd forwards
// them to $JS.API in the tenant's account, counting them against the
// tenant's rate. The client may not reach $JS.API itself, so a flood of
// API calls cannot fill the server's shared API queue.
const ClientAPIPrefix = "forever.jsapi"

// ClientPermissions are a tenant client's of role r: send the commands r
// may (Role.Verbs: forever.cmd.*.<verb>, or forever.cmd.> for a writer or
// admin, but AdminVerbs for the admin only), list agents (forever.list)
// and read the cluster's view (forever.cluster), subscribe to chunks,
// agents' broadcasts (forever.bcast.>) and inboxes, and run ordered
// consumers (pull, ack none) on the chunks streams through
// ClientAPIPrefix. It may not ack ($JS.ACK): the server publishes an
// ack's answer on the reply subject the acker chose, from inside the
// account. Everything else is denied by the server.
//
// The API calls name their stream with a wildcard: a sharded log has a
// chunks stream a shard (FOREVER_CHUNKS_<k>), which a subject wildcard
// cannot match by prefix, and listing every shard's calls would pass the
// 4 KiB a client's CONNECT may take. agentd's forwarder, the only way
// from ClientAPIPrefix to $JS.API, refuses a call on any stream but the
// log's chunks streams (package tenancy). Nothing else of JetStream is
// allowed (no $JS.FC: a client's consumers are pull consumers, which take
// no flow control).
func ClientPermissions(r Role) *jwt.Permissions {
	p := &jwt.Permissions{}
	api := ClientAPIPrefix + "."
	if vs := r.Verbs(); vs == nil {
		p.Pub.Allow.Add("forever.cmd.>")
		for _, v := range AdminVerbs {
			if !r.Allows(v) {
				p.Pub.Deny.Add("forever.cmd.*." + v)
			}
		}
	} else {
		for _, v := range vs {
			p.Pub.Allow.Add("forever.cmd.*." + v)
		}
	}
	p.Pub.Allow.Add(
		"forever.list",
		"forever.cluster",
		api+"INFO",
		api+"STREAM.INFO.*",
		api+"CONSUMER.CREATE.*.>",
		api+"CONSUMER.INFO.*.>",
		api+"CONSUMER.DELETE.*.>",
		api+"CONSUMER.MSG.NEXT.*.>",
		api+"STREAM.MSG.GET.*",
		api+"DIRECT.GET.*",
		api+"DIRECT.GET.*.>",
	)
	p.Sub.Allow.Add("forever.chunk.>", "forever.bcast.>", InboxPrefix+">")
	return p
}
