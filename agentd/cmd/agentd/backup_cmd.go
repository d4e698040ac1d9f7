package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/ownership"
)

const backupUsage = `Usage:
  agentd backup --out dir [--server url] [--creds admin.creds] [keys]
      snapshot every Forever stream and KV bucket of a running agentd (with
      --auth, of every tenant too) into dir, with a signed manifest
  agentd restore --from dir [--server url] [--creds admin.creds] [--replicas n] [keys]
      restore a backup into a running agentd whose streams are empty (a new
      node or cluster), then restart agentd on every node
  agentd restore --from dir --data dir [keys]
      restore a backup without tenants into the data dir of a stopped (or
      never started) agentd

Keys (the same for the backup and its restore):
  --auth-secret-file file     the secret the cluster's nodes share (default
                              $FOREVER_AUTH_SECRET_FILE): signs the manifest
  --encryption-key-file file  a key of at least 32 bytes, mode 0600 (default
                              $FOREVER_ENCRYPTION_KEY_FILE): encrypts every
                              file of the backup (AES-256-GCM), and signs the
                              manifest when there is no --auth-secret-file
  --allow-unsigned            restore a backup made with neither (its files
                              are then checked against checksums only)

Every file is checked against the manifest before anything is restored,
and a restore that fails half-way deletes what it restored: the target is
empty again, ready for a retry.

A backup is consistent per stream, not across streams: each stream is
snapshotted at its own moment, events before chunks (docs/operations.md).
The lease bucket is not backed up (leases are who serves what now); its
partition count is, and a restore refuses a target with another count.
--server (alias --nats-url) defaults to $NATS_URL or nats://127.0.0.1:4222, --creds to
$FOREVER_CREDS: with --auth, the admin credential <data>/admin.creds;
--tls-ca (default $FOREVER_TLS_CA) is the CA of agentd's certificate.
`

// accessTimeout bounds the wait for the tenants' credentials: on a restore,
// until the nodes serve the tenants of the restored registry.
const accessTimeout = 2 * time.Minute

// backupOpts are the flags of backup and restore.
type backupOpts struct {
	natsURL, creds, tlsCA, out, from, data, secretFile, keyFile *string
	replicas                                                    *int
	allowUnsigned                                               *bool
}

// backupFlagSet defines the flags of backup or restore (cmd).
func backupFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *backupOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o backupOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	o.out = fs.String("out", "", "the `dir` the backup is written to (backup)")
	o.from = fs.String("from", "", "the backup's `dir` (restore)")
	o.data = fs.String("data", "", "restore into the data `dir` of a stopped agentd, not over NATS (restore)")
	o.replicas = fs.Int("replicas", 0, "replicas of the restored streams (restore; 0: as backed up)")
	o.secretFile = fs.String("auth-secret-file", getenv("FOREVER_AUTH_SECRET_FILE"), "the `file` of the secret the cluster's nodes share: signs the manifest (default $FOREVER_AUTH_SECRET_FILE)")
	o.keyFile = fs.String("encryption-key-file", getenv("FOREVER_ENCRYPTION_KEY_FILE"), "a key `file` (32 bytes or more, mode 0600) that encrypts the backup (default $FOREVER_ENCRYPTION_KEY_FILE)")
	o.allowUnsigned = fs.Bool("allow-unsigned", false, "restore a backup made with neither key (restore)")
	return fs, &o
}

// backupCommand runs "agentd backup" or "agentd restore" (in.cmd).
func backupCommand(ctx context.Context, in invocation, args []string) error {
	cmd, getenv, stdout, stderr := in.cmd, in.getenv, in.stdout, in.stderr
	fs, o := backupFlagSet(cmd, getenv)
	natsURL, creds, tlsCA, out, from, data := o.natsURL, o.creds, o.tlsCA, o.out, o.from, o.data
	replicas, secretFile, keyFile, allowUnsigned := o.replicas, o.secretFile, o.keyFile, o.allowUnsigned
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected argument %q", pos[0])
	}
	urlSet := serverSet(fs)
	opts := append(clientOptions(*creds, *tlsCA), nats.Name("agentd "+cmd))
	keys, err := backupKeys(*secretFile, *keyFile)
	if err != nil {
		return err
	}
	if cmd == "backup" {
		if *out == "" {
			return usageErr("--out is required: the directory to write the backup to")
		}
		if *allowUnsigned {
			return usageErr("--allow-unsigned is a flag of restore")
		}
		return runBackupTo(ctx, *natsURL, opts, *creds != "", *out, keys, stdout, stderr)
	}
	switch {
	case *from == "":
		return usageErr("--from is required: the backup's directory")
	case *replicas < 0:
		return usageErr("--replicas must not be negative")
	case *data != "" && urlSet:
		return usageErr("give --server or --data, not both")
	}
	// The whole backup is checked before anything of it is restored: the
	// manifest's signature and key, then every file against it.
	m, err := backup.ReadManifest(*from)
	if err != nil {
		return err
	}
	if err := m.Verify(keys, *allowUnsigned); err != nil {
		return err
	}
	if m.Signature == nil {
		fmt.Fprintf(stderr, "agentd restore: %s is not signed: its files are checked against its checksums only (--allow-unsigned)\n", *from)
	}
	if err := backup.CheckFiles(*from, m, keys.Seal); err != nil {
		return err
	}
	if *data != "" {
		return restoreDataDir(ctx, *data, *from, m, keys.Seal, stdout)
	}
	return runRestoreFrom(ctx, *natsURL, opts, *creds != "", *from, m, *replicas, keys.Seal, stdout, stderr)
}

// backupKeys derives the keys of a backup from the files of
// --auth-secret-file and --encryption-key-file, either or both empty.
func backupKeys(secretFile, keyFile string) (backup.Keys, error) {
	var secret, key []byte
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return backup.Keys{}, usageErr("--auth-secret-file: %v", unwrapPath(err))
		}
		if secret = bytes.TrimSpace(b); len(secret) < auth.MinSecret {
			return backup.Keys{}, usageErr("--auth-secret-file %s holds %d bytes, fewer than %d: it is not the cluster's auth secret", secretFile, len(secret), auth.MinSecret)
		}
	}
	if keyFile != "" {
		var err error
		if key, err = agentd.ReadEncryptionKey(keyFile); err != nil {
			return backup.Keys{}, usageErr("--encryption-key-file: %v", err)
		}
	}
	return backup.NewKeys(secret, key), nil
}

// unwrapPath is the cause of a file error, without the operation and path
// the caller names itself.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// runBackupTo backs up the agentd at natsURL into dir, which must not hold
// a backup already.
func runBackupTo(ctx context.Context, natsURL string, opts []nats.Option, admin bool, dir string, keys backup.Keys, stdout, stderr io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, backup.ManifestFile)); err == nil {
		return usageErr("%s already holds a backup; give a new directory", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return connectError(natsURL, opts, err)
	}
	defer nc.Close()
	m := &backup.Manifest{Format: backup.Format, Created: time.Now().UTC()}
	if m.Partitions, err = partitionCount(ctx, nc); err != nil {
		return err
	}
	if m.Shards, err = backupShards(ctx, nc); err != nil {
		return err
	}
	acc, err := backup.BackupAccount(ctx, nc, dir, "agentd", "", keys.Seal)
	if err != nil {
		return err
	}
	m.Accounts = append(m.Accounts, acc)
	if admin {
		access, err := tenantAccess(ctx, nc, nil)
		if err != nil {
			return err
		}
		for _, ta := range access {
			err := withTenant(natsURL, opts, ta, func(tnc *nats.Conn) error {
				acc, err := backup.BackupAccount(ctx, tnc, dir, filepath.Join("tenants", ta.Tenant), ta.Tenant, keys.Seal)
				m.Accounts = append(m.Accounts, acc)
				return err
			})
			if err != nil {
				return fmt.Errorf("tenant %s: %w", ta.Tenant, err)
			}
		}
	}
	m.Seal(keys)
	if err := backup.WriteManifest(dir, m); err != nil {
		return err
	}
	if m.Signature == nil {
		fmt.Fprintf(stderr, "agentd backup: %s is not signed (no --auth-secret-file or --encryption-key-file): its restore needs --allow-unsigned\n", dir)
	}
	return printSummary(stdout, "backup", dir, m)
}

// runRestoreFrom restores m into the running agentd at natsURL: its own
// account, which holds the tenant registry, then each tenant's once the
// nodes serve it.
//
// It is all or nothing: when an account fails, the accounts restored
// before it are undone (backup.UndoAccount), so a retry finds the target
// empty.
func runRestoreFrom(ctx context.Context, natsURL string, opts []nats.Option, admin bool, dir string, m *backup.Manifest, replicas int, seal []byte, stdout, stderr io.Writer) error {
	var tenants []string
	for _, acc := range m.Accounts[1:] {
		tenants = append(tenants, acc.Tenant)
	}
	if len(tenants) > 0 && !admin {
		return usageErr("the backup holds %d tenants: give --creds, the target agentd's admin credential", len(tenants))
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return connectError(natsURL, opts, err)
	}
	defer nc.Close()
	err = restoreAccounts(ctx, nc, natsURL, opts, dir, m, tenants, replicas, seal)
	if admin {
		// The admin's restore is audited as the admin, in each tenant's
		// record (or the node's), whether it took or was undone.
		rec := tenancy.AuditRecordRequest{Action: "restore", Tenants: tenants, Outcome: audit.OK,
			Detail: fmt.Sprintf("restore of %s (%d accounts, made %s)", filepath.Base(dir), len(m.Accounts), m.Created.UTC().Format(time.RFC3339))}
		if err != nil {
			rec.Outcome, rec.Detail = audit.Failed, rec.Detail+": "+err.Error()
		}
		body, _ := json.Marshal(rec)
		if msg, rerr := nc.Request(tenancy.AdminAuditSubject, body, accessTimeout); rerr != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
			fmt.Fprintln(stderr, "agentd restore: the target agentd did not record this restore in its audit log")
		}
	}
	if err != nil {
		return err
	}
	return printSummary(stdout, "restore", dir, m)
}

// restoreAccounts restores m's accounts through nc (the admin's, or
// agentd's own without --auth), undoing them all when one fails.
func restoreAccounts(ctx context.Context, nc *nats.Conn, natsURL string, opts []nats.Option, dir string, m *backup.Manifest, tenants []string, replicas int, seal []byte) error {
	fresh, err := checkLayout(ctx, nc, m)
	if err != nil {
		return err
	}
	if err := backup.RestoreAccount(ctx, nc, dir, m.Accounts[0], replicas, seal); err != nil {
		return err
	}
	if fresh {
		if err := recordLayout(ctx, nc, m, replicas); err != nil {
			return errors.Join(err, backup.UndoAccount(ctx, nc, m.Accounts[0]))
		}
	}
	var access []tenancy.TenantAccess
	// undo deletes the accounts restored before a failure: the tenants'
	// first, then agentd's own.
	undo := func(cause error, restored int) error {
		errs := []error{cause}
		for i := restored - 1; i >= 0; i-- {
			errs = append(errs, withTenant(natsURL, opts, access[i], func(tnc *nats.Conn) error {
				return backup.UndoAccount(ctx, tnc, m.Accounts[i+1])
			}))
		}
		errs = append(errs, backup.UndoAccount(ctx, nc, m.Accounts[0]))
		if err := errors.Join(errs[1:]...); err != nil {
			return fmt.Errorf("%w; undoing the restore: %w", cause, err)
		}
		return fmt.Errorf("%w; the restore was undone", cause)
	}
	if len(tenants) > 0 {
		var err error
		access, err = tenantAccess(ctx, nc, tenants)
		if err != nil {
			return undo(err, 0)
		}
		for i, ta := range access {
			err := withTenant(natsURL, opts, ta, func(tnc *nats.Conn) error {
				return backup.RestoreAccount(ctx, tnc, dir, m.Accounts[i+1], replicas, seal)
			})
			if err != nil {
				return undo(fmt.Errorf("tenant %s: %w", ta.Tenant, err), i)
			}
		}
	}
	return nil
}

// restoreDataDir restores m, which must hold no tenants, into the
// JetStream store of the data dir of a stopped agentd.
func restoreDataDir(ctx context.Context, data, dir string, m *backup.Manifest, seal []byte, stdout io.Writer) error {
	if len(m.Accounts) > 1 {
		return usageErr("the backup holds tenants: restore it into a running agentd with --auth (--server and --creds)")
	}
	nc, release, err := connectDataDir(data, true, "agentd restore")
	if err != nil {
		return err
	}
	defer release()
	fresh, err := checkLayout(ctx, nc, m)
	if err != nil {
		return err
	}
	if err := backup.RestoreAccount(ctx, nc, dir, m.Accounts[0], 0, seal); err != nil {
		return err
	}
	if fresh {
		if err := recordLayout(ctx, nc, m, 0); err != nil {
			return errors.Join(err, backup.UndoAccount(ctx, nc, m.Accounts[0]))
		}
	}
	return printSummary(stdout, "restore", dir, m)
}

// tenantAccess asks the admin service for the credentials of the named
// tenants (every tenant when names is empty), waiting, for named ones,
// until the node serves them: a restored registry reaches the nodes
// within seconds.
func tenantAccess(ctx context.Context, nc *nats.Conn, names []string) ([]tenancy.TenantAccess, error) {
	body, _ := json.Marshal(tenancy.AccessRequest{Tenants: names})
	deadline := time.Now().Add(accessTimeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, accessTimeout)
		msg, err := nc.RequestWithContext(rctx, tenancy.AdminAccessSubject, body)
		cancel()
		code := ""
		if err == nil {
			code = msg.Header.Get("Nats-Service-Error-Code")
		}
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, fmt.Errorf("no agentd with --auth answers on %s (is it running with --auth, and is --creds its admin.creds?)", nc.ConnectedUrlRedacted())
		case err != nil:
			return nil, fmt.Errorf("tenant access: %w", err)
		case code == "":
			var reply tenancy.AccessReply
			if err := json.Unmarshal(msg.Data, &reply); err != nil {
				return nil, fmt.Errorf("tenant access: bad reply: %w", err)
			}
			return reply.Tenants, nil
		case (code == "404" || code == "503") && len(names) > 0 && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		default:
			return nil, fmt.Errorf("tenant access: %s (%s)", msg.Header.Get("Nats-Service-Error"), code)
		}
	}
}

// withTenant runs fn over a connection as the user of ta.Creds, which is
// never written to disk.
func withTenant(natsURL string, opts []nats.Option, ta tenancy.TenantAccess, fn func(*nats.Conn) error) error {
	tok, err := jwt.ParseDecoratedJWT([]byte(ta.Creds))
	if err != nil {
		return err
	}
	kp, err := jwt.ParseDecoratedUserNKey([]byte(ta.Creds))
	if err != nil {
		return err
	}
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	// The tenant's user replaces the admin's creds; TLS and the name stay.
	topts := append([]nats.Option{}, opts...)
	topts = append(topts, nats.UserJWTAndSeed(tok, string(seed)), nats.Name("agentd backup "+ta.Tenant))
	nc, err := nats.Connect(natsURL, topts...)
	if err != nil {
		return fmt.Errorf("connect as the tenant: %w", err)
	}
	defer nc.Close()
	return fn(nc)
}

// partitionCount reads the partition count agentd stored in its partitions
// bucket (in its lease bucket before that existed), 0 when there is none.
func partitionCount(ctx context.Context, nc *nats.Conn) (int, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	for _, bucket := range []string{ownership.DefaultPartitionsBucket, ownership.DefaultBucket} {
		kv, err := js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("bucket %s: %w", bucket, err)
		}
		e, err := kv.Get(ctx, ownership.PartitionsKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("bucket %s: %w", bucket, err)
		}
		n, err := strconv.Atoi(string(e.Value()))
		if err != nil {
			return 0, fmt.Errorf("bucket %s: partition count %q: %w", bucket, e.Value(), err)
		}
		return n, nil
	}
	return 0, nil
}

// checkPartitions refuses a target whose partition count is not the
// backup's.
func checkPartitions(ctx context.Context, nc *nats.Conn, m *backup.Manifest) error {
	n, err := partitionCount(ctx, nc)
	if err != nil {
		return err
	}
	if n != 0 && m.Partitions != 0 && n != m.Partitions {
		return fmt.Errorf("the backup's cluster had %d partitions and the target has %d: start the target's agentd with --partitions %d on a new data dir",
			m.Partitions, n, m.Partitions)
	}
	return nil
}

// printSummary prints what a backup or restore moved as one JSON line.
func printSummary(stdout io.Writer, what, dir string, m *backup.Manifest) error {
	// bytes is the stream's (its messages as the server stores them),
	// snapshotBytes the size of its snapshot file in the backup dir.
	type stream struct {
		Name          string `json:"name"`
		Messages      uint64 `json:"messages"`
		Bytes         uint64 `json:"bytes"`
		SnapshotBytes int64  `json:"snapshotBytes"`
	}
	type account struct {
		Tenant  string   `json:"tenant,omitempty"`
		Streams []stream `json:"streams"`
	}
	out := struct {
		Done     string    `json:"done"`
		Dir      string    `json:"dir"`
		Created  time.Time `json:"created"`
		Accounts []account `json:"accounts"`
	}{Done: what, Dir: dir, Created: m.Created}
	for _, a := range m.Accounts {
		acc := account{Tenant: a.Tenant, Streams: []stream{}}
		for _, s := range a.Streams {
			acc.Streams = append(acc.Streams, stream{s.Name, s.Messages(), s.Bytes(), s.Size})
		}
		out.Accounts = append(out.Accounts, acc)
	}
	b, _ := json.Marshal(out)
	_, err := fmt.Fprintln(stdout, string(b))
	return err
}
