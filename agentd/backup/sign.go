package backup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Signature is a manifest's signature: HMAC-SHA256, keyed by Keys.Sign,
// over the manifest's canonical JSON without its signature (json.Marshal
// of the parsed manifest, so what is checked is what is restored).
type Signature struct {
	Alg string `json:"alg"`
	// Key names the secret the key was derived from: SignedByAuthSecret
	// or SignedByEncryptionKey.
	Key string `json:"key"`
	MAC string `json:"mac"`
}

// Sealed says a backup's files are sealed (seal.go).
type Sealed struct {
	Cipher string `json:"cipher"`
	// KeyCheck is an HMAC of a fixed text with the sealing key: a restore
	// with another key is told so before anything is read.
	KeyCheck string `json:"keyCheck"`
}

// The manifest's signature algorithm.
const signAlg = "HMAC-SHA256"

// Errors of Manifest.Verify, each a sentence an operator acts on.
var (
	// ErrUnsigned: the manifest has no signature, and the restore was not
	// told to accept one without (AllowUnsigned).
	ErrUnsigned = errors.New("backup: the backup is not signed")
	// ErrSignature: the signature does not match the manifest and the key
	// given: the manifest was changed, or the key is another.
	ErrSignature = errors.New("backup: the manifest's signature does not match")
	// ErrNoKey: the backup needs a key the restore was not given.
	ErrNoKey = errors.New("backup: the backup needs a key")
	// ErrWrongKey: the sealing key is not the one the backup was made with.
	ErrWrongKey = errors.New("backup: the encryption key is not the backup's")
)

// mac is the manifest's signature with key.
func (m *Manifest) mac(key []byte) string {
	c := *m
	c.Signature = nil
	b, _ := json.Marshal(&c)
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// Seal records in m how keys seal and sign it, and signs it: the last
// change before WriteManifest. Without keys it is marked unsigned only by
// having no signature.
func (m *Manifest) Seal(keys Keys) {
	m.Sealed, m.Signature = nil, nil
	if keys.Seal != nil {
		m.Sealed = &Sealed{Cipher: Cipher, KeyCheck: keyCheck(keys.Seal)}
	}
	if keys.Sign != nil {
		m.Signature = &Signature{Alg: signAlg, Key: keys.SignedBy, MAC: m.mac(keys.Sign)}
	}
}

// Verify checks m against keys before anything is restored: its signature
// (an unsigned manifest only with allowUnsigned, a signed one always, with
// the key it names), then, for a sealed backup, that keys.Seal is its key.
func (m *Manifest) Verify(keys Keys, allowUnsigned bool) error {
	switch s := m.Signature; {
	case s == nil && !allowUnsigned:
		return fmt.Errorf("%w (it was made without --auth-secret-file or --encryption-key-file): "+
			"its files are checked against the manifest's checksums only, which whoever changed a file can recompute; "+
			"restore it with --allow-unsigned if you trust where it was kept", ErrUnsigned)
	case s == nil:
	case s.Alg != signAlg:
		return fmt.Errorf("%w: it is signed with %q, this agentd checks %s", ErrSignature, s.Alg, signAlg)
	case keys.verifyKey(s.Key) == nil:
		return fmt.Errorf("%w: it is signed with a key derived from --%s: give the restore that file", ErrNoKey, s.Key)
	case !hmac.Equal([]byte(m.mac(keys.verifyKey(s.Key))), []byte(s.MAC)):
		return fmt.Errorf("%w: the manifest was changed after the backup, or --%s is not the one the backup was made with; nothing was restored", ErrSignature, s.Key)
	}
	switch {
	case m.Sealed == nil:
	case m.Sealed.Cipher != Cipher:
		return fmt.Errorf("%w: its files are sealed with %q, this agentd reads %s", ErrWrongKey, m.Sealed.Cipher, Cipher)
	case keys.Seal == nil:
		return fmt.Errorf("%w: its files are encrypted: give the restore --encryption-key-file, the key the backup was made with", ErrNoKey)
	case !hmac.Equal([]byte(keyCheck(keys.Seal)), []byte(m.Sealed.KeyCheck)):
		return fmt.Errorf("%w: --encryption-key-file is not the key the backup was made with; nothing was restored", ErrWrongKey)
	}
	return nil
}

// validate checks what a restore acts on: the accounts (agentd's first,
// then tenants with names), stream names that are plain JetStream names
// (they become API subjects), and file paths that stay inside the backup.
func (m *Manifest) validate() error {
	if m.Format != Format {
		return fmt.Errorf("format %d, this agentd reads format %d", m.Format, Format)
	}
	if len(m.Accounts) == 0 {
		return errors.New("no accounts")
	}
	if m.Partitions < 0 {
		return fmt.Errorf("partitions %d", m.Partitions)
	}
	files := map[string]bool{}
	for i, a := range m.Accounts {
		if (i == 0) != (a.Tenant == "") || strings.ContainsAny(a.Tenant, "/\\. *>\x00") {
			return fmt.Errorf("account %d: tenant %q", i, a.Tenant)
		}
		for _, s := range a.Streams {
			if !validStreamName(s.Name) {
				return fmt.Errorf("stream name %q", s.Name)
			}
			if !filepath.IsLocal(s.File) || files[s.File] {
				return fmt.Errorf("stream %s: file %q", s.Name, s.File)
			}
			files[s.File] = true
			if s.Size < 0 {
				return fmt.Errorf("stream %s: size %d", s.Name, s.Size)
			}
			if b, err := hex.DecodeString(s.SHA256); err != nil || len(b) != sha256.Size {
				return fmt.Errorf("stream %s: sha256 %q", s.Name, s.SHA256)
			}
			if !json.Valid(s.Config) || !json.Valid(s.State) {
				return fmt.Errorf("stream %s: config or state is not JSON", s.Name)
			}
		}
	}
	return nil
}

// validStreamName: a Forever stream (FOREVER_*, KV_FOREVER_* or
// OBJ_FOREVER_*) whose name holds no subject token separator, wildcard or
// white space.
func validStreamName(n string) bool {
	if !strings.HasPrefix(n, "FOREVER_") && !strings.HasPrefix(n, "KV_FOREVER_") && !strings.HasPrefix(n, "OBJ_FOREVER_") || len(n) > 255 {
		return false
	}
	return !strings.ContainsAny(n, ". *>\t\r\n\x00/\\")
}

// ParseManifest parses and validates a manifest's bytes. It does not check
// the signature (Verify does).
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s is not a backup manifest: it is not valid JSON of one", ManifestFile)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	return &m, nil
}
