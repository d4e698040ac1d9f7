package auth

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/forever-agents/forever/internal/atomicfile"
)

// Keys are the operator's key pairs. LoadKeys keeps them under one
// directory, one seed per file.
type Keys struct {
	Operator nkeys.KeyPair // signs account JWTs
	System   nkeys.KeyPair // the system account's identity
	Service  nkeys.KeyPair // the service account's identity, signs its users
	Signer   nkeys.KeyPair // account signing key of every tenant account
}

// key files under the key directory, with the prefix each must have.
var keyFiles = []struct {
	name   string
	prefix nkeys.PrefixByte
	get    func(*Keys) *nkeys.KeyPair
}{
	{"operator.nk", nkeys.PrefixByteOperator, func(k *Keys) *nkeys.KeyPair { return &k.Operator }},
	{"system.nk", nkeys.PrefixByteAccount, func(k *Keys) *nkeys.KeyPair { return &k.System }},
	{"service.nk", nkeys.PrefixByteAccount, func(k *Keys) *nkeys.KeyPair { return &k.Service }},
	{"tenant-signer.nk", nkeys.PrefixByteAccount, func(k *Keys) *nkeys.KeyPair { return &k.Signer }},
}

// LoadKeys reads the keys from dir, creating dir (0700) and any missing key
// (0600) first. created reports whether the operator key was new, that is,
// whether this is the first start with auth.
func LoadKeys(dir string) (k *Keys, created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("auth: key dir: %w", err)
	}
	k = &Keys{}
	for i, f := range keyFiles {
		path := filepath.Join(dir, f.name)
		kp, isNew, err := loadOrCreate(path, f.prefix)
		if err != nil {
			return nil, false, err
		}
		if i == 0 {
			created = isNew
		}
		*f.get(k) = kp
	}
	return k, created, nil
}

func loadOrCreate(path string, prefix nkeys.PrefixByte) (nkeys.KeyPair, bool, error) {
	seed, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		kp, err := nkeys.CreatePair(prefix)
		if err != nil {
			return nil, false, fmt.Errorf("auth: create key %s: %w", filepath.Base(path), err)
		}
		seed, _ := kp.Seed()
		if err := writeFileAtomic(path, append(seed, '\n'), 0o600); err != nil {
			return nil, false, err
		}
		return kp, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("auth: read key %s: %w", filepath.Base(path), err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		// The error of nkeys never holds the seed; ours names the file only.
		return nil, false, fmt.Errorf("auth: key %s is not an nkey seed", path)
	}
	pub, _ := kp.PublicKey()
	if !nkeys.IsValidPublicKey(pub) || nkeys.Prefix(pub) != prefix {
		return nil, false, fmt.Errorf("auth: key %s has the wrong type", path)
	}
	return kp, false, nil
}

// writeFileAtomic writes data to path whole (atomicfile.Write).
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := atomicfile.Write(path, data, perm); err != nil {
		return fmt.Errorf("auth: write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// WriteCreds writes a creds file (0600) atomically.
func WriteCreds(path string, creds []byte) error { return writeFileAtomic(path, creds, 0o600) }

func pub(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// MinSecret is the shortest secret DeriveKeys takes.
const MinSecret = 32

// ErrShortSecret is returned by DeriveKeys for a secret under MinSecret
// bytes.
var ErrShortSecret = errors.New("auth: the shared secret is shorter than 32 bytes")

// DeriveKeys derives the keys from a secret shared by the nodes of a
// cluster: each key's seed is SHA-256 of a label and the secret, so every
// node started with the same secret trusts the same operator and signs
// with the same keys, and no key has to be distributed. Surrounding
// whitespace of the secret is ignored.
func DeriveKeys(secret []byte) (*Keys, error) {
	secret = []byte(strings.TrimSpace(string(secret)))
	if len(secret) < MinSecret {
		return nil, ErrShortSecret
	}
	k := &Keys{}
	for _, f := range keyFiles {
		h := sha256.New()
		h.Write([]byte("forever auth v1\x00" + f.name + "\x00"))
		h.Write(secret)
		kp, err := nkeys.FromRawSeed(f.prefix, h.Sum(nil))
		if err != nil {
			return nil, fmt.Errorf("auth: derive %s: %w", f.name, err)
		}
		*f.get(k) = kp
	}
	return k, nil
}
