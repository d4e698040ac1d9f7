package agentd

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
)

// Store ciphers of --encryption-cipher.
const (
	CipherChaCha = "chacha"
	CipherAES    = "aes"
)

// MinEncryptionKey is the shortest key --encryption-key-file may hold.
const MinEncryptionKey = 32

// encryptionFlags defines --encryption-key-file and --encryption-cipher.
func encryptionFlags(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.EncryptionKeyFile, "encryption-key-file", cfg.EncryptionKeyFile,
		"`file` holding a key (at least 32 bytes, mode 0600) that encrypts the embedded server's JetStream store at rest: streams, KV buckets, consumers; "+
			"an existing plain store is encrypted at start; the Pebble views are not (keep --data on an encrypted volume); "+
			"agentd backup and restore take it to encrypt a backup")
	fs.StringVar(&cfg.EncryptionCipher, "encryption-cipher", cfg.EncryptionCipher,
		"`cipher` of --encryption-key-file: chacha (ChaCha20-Poly1305, the default) or aes (AES-GCM)")
}

// validateEncryption checks the encryption flags.
func (c *Config) validateEncryption() error {
	switch c.EncryptionCipher {
	case "", CipherChaCha, CipherAES:
	default:
		return configErrorf("encryption-cipher", "cipher %q is not %q or %q", c.EncryptionCipher, CipherChaCha, CipherAES)
	}
	if c.EncryptionKeyFile == "" {
		if c.EncryptionCipher != "" {
			return configErrorf("encryption-cipher", "--encryption-cipher needs --encryption-key-file")
		}
		return nil
	}
	if c.NATSURL != "" && c.Tenant == nil {
		return configErrorf("encryption-key-file", "--encryption-key-file encrypts the embedded server's store; with --nats-url set "+
			"encryption in that server's jetstream block (cipher and key)")
	}
	return nil
}

// ReadEncryptionKey reads the key of an --encryption-key-file, without its
// surrounding white space. It refuses a file that group or others may
// read (a key others can read protects nothing) and a key shorter than
// MinEncryptionKey; its errors are sentences that name the file and say
// what to do, never the key. agentd backup and restore read the key so
// too.
func ReadEncryptionKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("encryption key file: %v", unwrapPathError(err))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("encryption key file %s may be read by group or others (mode %04o): "+
			"make it readable by its owner only with chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryption key file: %v", unwrapPathError(err))
	}
	key := bytes.TrimSpace(b)
	if len(key) < MinEncryptionKey {
		return nil, fmt.Errorf("encryption key file %s holds %d bytes, fewer than %d (umask 077; head -c 48 /dev/urandom | base64 > key)",
			path, len(key), MinEncryptionKey)
	}
	return key, nil
}

// encryptionOptions turns the embedded server's store encryption on with
// the key of --encryption-key-file. The key's content never appears in an
// error.
func (c *Config) encryptionOptions(opts *server.Options) error {
	if c.EncryptionKeyFile == "" {
		return nil
	}
	key, err := ReadEncryptionKey(c.EncryptionKeyFile)
	if err != nil {
		return configErrorf("encryption-key-file", "%v", err)
	}
	opts.JetStreamKey = string(key)
	opts.JetStreamCipher = server.ChaCha
	if c.EncryptionCipher == CipherAES {
		opts.JetStreamCipher = server.AES
	}
	return nil
}
