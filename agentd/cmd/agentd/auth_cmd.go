package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/tenancy"
)

const authUsage = `Usage:
  agentd auth admin-creds [--data dir | --auth-secret-file file] [--server url]
      print a new admin credential (a creds file, as <data>/admin.creds) on
      stdout, minted from the operator's keys: the secret every node of a
      cluster shares, or <data>/auth. It is how the admin credential leaves
      a pod whose image has no shell:
        kubectl get secret forever-auth -o jsonpath='{.data.secret}' | base64 -d > secret
        agentd auth admin-creds --auth-secret-file secret > admin.creds
  agentd auth admin-token [--data dir | --auth-secret-file file] [--ttl 12h] [--server url]
      print a new admin HTTP token (fvra_...), minted from the operator's
      keys, that expires after --ttl (default 12h, at most the maximum of
      auth.MaxAdminTokenTTL). With it, and the header X-Forever-Tenant, the
      HTTP API and the console (/console) reach every tenant; GET /v1/tenants
      lists them. It cannot be revoked one by one: it expires.
  agentd auth server-config [--data dir | --auth-secret-file file] [--jwt-dir dir]
      print the nats-server configuration that makes an external NATS server
      (each server of a cluster) trust agentd's operator: the operator JWT,
      the system account, a full account resolver storing under --jwt-dir
      (default ./jwt, relative to the server), and agentd's accounts
      preloaded. Add jetstream {} and, for a cluster, the cluster block;
      then run agentd --auth --nats-url <url> with the same --data or
      --auth-secret-file.

--data defaults to $FOREVER_DATA or ./data (the keys are in <data>/auth),
--auth-secret-file to $FOREVER_AUTH_SECRET_FILE.

admin-creds and admin-token record the minting, as the admin, in the audit
log of the agentd at --server (default $NATS_URL, else
nats://127.0.0.1:4222; --tls-ca as for every client command), reached
with an admin credential of the same keys; when none answers, they say so
on stderr and print the credential all the same. Whoever holds the keys
can sign a credential without agentd, so the record covers what agentd's
own command minted against a running agentd, not every credential.
`

// authOpts are the flags of the auth commands.
type authOpts struct {
	cfg     agentd.Config // DataDir and AuthSecretFile
	jwtDir  *string
	ttl     *time.Duration
	natsURL *string // the agentd whose audit log records a minting
	tlsCA   *string
}

// authFlagSet defines the flags of auth server-config, admin-creds and
// admin-token.
func authFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *authOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o authOpts
	o.cfg.DataDir = getenv("FOREVER_DATA")
	if o.cfg.DataDir == "" {
		o.cfg.DataDir = agentd.DefaultDataDir
	}
	o.cfg.AuthSecretFile = getenv("FOREVER_AUTH_SECRET_FILE")
	fs.StringVar(&o.cfg.DataDir, "data", o.cfg.DataDir, "the data `dir` whose auth/ holds the operator's keys (default $FOREVER_DATA, else ./data)")
	fs.StringVar(&o.cfg.AuthSecretFile, "auth-secret-file", o.cfg.AuthSecretFile, "the `file` of the secret the cluster's nodes share, instead of --data (default $FOREVER_AUTH_SECRET_FILE)")
	o.jwtDir = fs.String("jwt-dir", "jwt", "the `dir` the external server's account resolver stores under (server-config)")
	o.ttl = fs.Duration("ttl", 0, "how long the admin token works (admin-token; 0: 12h)")
	url := getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	o.natsURL = fs.String("server", url, "NATS `url` of the agentd whose audit log records the minting, for admin-creds and admin-token (default $NATS_URL, else "+nats.DefaultURL+")")
	fs.StringVar(o.natsURL, "nats-url", url, "alias of --server")
	o.tlsCA = fs.String("tls-ca", getenv("FOREVER_TLS_CA"), "CA `file` that signed agentd's certificate, for --server (default $FOREVER_TLS_CA)")
	return fs, &o
}

// authCommand runs "agentd auth". It reads local files and does not stop
// on Ctrl-C: what fails is a failure (failed).
func authCommand(_ context.Context, in invocation, args []string) (err error) {
	defer func() { err = failed(err) }()
	getenv, stdout, stderr := in.getenv, in.stdout, in.stderr
	if len(args) == 0 {
		return usageErr("missing server-config, admin-creds or admin-token")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return flag.ErrHelp
	}
	if args[0] != "server-config" && args[0] != "admin-creds" && args[0] != "admin-token" {
		return usageErr("unknown auth command %q: server-config, admin-creds or admin-token", args[0])
	}
	fs, o := authFlagSet("auth "+args[0], getenv)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	cfg, jwtDir, ttl, natsURL, tlsCA := o.cfg, o.jwtDir, o.ttl, *o.natsURL, o.tlsCA
	if len(pos) != 0 {
		return usageErr("%s takes no arguments", args[0])
	}
	if args[0] == "admin-token" {
		tok, exp, err := agentd.AdminToken(cfg, *ttl)
		if err != nil {
			return err
		}
		if _, err = fmt.Fprintln(stdout, tok); err != nil {
			return err
		}
		recordMinting(cfg, natsURL, *tlsCA, "admin.token", "admin HTTP token minted by agentd auth admin-token, expires "+exp.UTC().Format(time.RFC3339), stderr)
		return nil
	}
	if args[0] == "admin-creds" {
		creds, err := agentd.AdminCreds(cfg)
		if err != nil {
			return err
		}
		if _, err = stdout.Write(creds); err != nil {
			return err
		}
		recordMinting(cfg, natsURL, *tlsCA, "admin.creds", "admin credential minted by agentd auth admin-creds", stderr)
		return nil
	}
	conf, err := agentd.ServerConfig(cfg, *jwtDir)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(stdout, conf)
	return err
}

// mintRecordTimeout bounds recordMinting's connect and request.
const mintRecordTimeout = 2 * time.Second

// recordMinting records a minting in the audit log of the agentd at
// natsURL, reached with an admin credential of the same keys; when none
// answers, it says so on stderr. Whoever holds the operator's keys can
// sign a credential without agentd at all, so no record can be forced:
// this one records the minting done with agentd's own command against a
// running agentd.
func recordMinting(cfg agentd.Config, natsURL, tlsCA, action, detail string, stderr io.Writer) {
	err := func() error {
		creds, err := agentd.AdminCreds(cfg)
		if err != nil {
			return err
		}
		tok, err := jwt.ParseDecoratedJWT(creds)
		if err != nil {
			return err
		}
		kp, err := jwt.ParseDecoratedUserNKey(creds)
		if err != nil {
			return err
		}
		seed, err := kp.Seed()
		if err != nil {
			return err
		}
		opts := []nats.Option{nats.UserJWTAndSeed(tok, string(seed)), nats.Name("agentd auth " + action),
			nats.Timeout(mintRecordTimeout), nats.NoReconnect()}
		if tlsCA != "" {
			opts = append(opts, nats.RootCAs(tlsCA))
		}
		nc, err := nats.Connect(natsURL, opts...)
		if err != nil {
			return err
		}
		defer nc.Close()
		body, _ := json.Marshal(tenancy.AuditRecordRequest{Action: action, Detail: detail})
		msg, err := nc.Request(tenancy.AdminAuditSubject, body, mintRecordTimeout)
		if err != nil {
			return err
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			return fmt.Errorf("%s (%s)", msg.Header.Get("Nats-Service-Error"), code)
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintf(stderr, "agentd auth: no audit log recorded this: no agentd with --auth and these keys answered at %s (%v); give --server to record it in a running agentd's audit log\n", natsURL, err)
	}
}
