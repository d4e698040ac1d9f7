package backup

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Keys are the keys of a backup, each derived (HKDF-SHA256) from a secret
// the operator holds: Sign signs the manifest (HMAC-SHA256), Seal encrypts
// the snapshot files (AES-256-GCM). Either may be nil: a backup without
// Sign is unsigned, one without Seal is in clear.
type Keys struct {
	Sign, Seal []byte
	// SignedBy names the secret Sign was derived from, as the manifest
	// records it: SignedByAuthSecret or SignedByEncryptionKey.
	SignedBy string
	// verify are the signing keys a restore may check with, by the secret
	// they derive from: a backup signed with the encryption key (made
	// without the auth secret) verifies with it even when the restore is
	// given both.
	verify map[string][]byte
}

// verifyKey is the key that checks a signature made with the secret by.
func (k Keys) verifyKey(by string) []byte {
	if key := k.verify[by]; key != nil {
		return key
	}
	if k.SignedBy == by {
		return k.Sign
	}
	return nil
}

// The secrets a manifest may be signed with.
const (
	SignedByAuthSecret    = "auth-secret-file"
	SignedByEncryptionKey = "encryption-key-file"
)

// Cipher is the cipher of a sealed backup's files.
const Cipher = "AES-256-GCM"

// The HKDF info strings: each key serves one purpose only.
const (
	infoSign = "forever backup manifest signature v1"
	infoSeal = "forever backup file encryption v1"
	infoFile = "forever backup file key v1"
	infoKey  = "forever backup key check v1"
)

// NewKeys derives a backup's keys: the signing key from authSecret (the
// secret every node of the cluster shares, --auth-secret-file) or, without
// one, from encryptionKey (--encryption-key-file); the sealing key from
// encryptionKey. Both are trimmed of surrounding white space, as agentd
// reads them. With neither, the keys are empty: the backup is unsigned.
func NewKeys(authSecret, encryptionKey []byte) Keys {
	k := Keys{verify: map[string][]byte{}}
	if len(authSecret) > 0 {
		k.verify[SignedByAuthSecret] = derive(authSecret, nil, infoSign)
	}
	if len(encryptionKey) > 0 {
		k.verify[SignedByEncryptionKey] = derive(encryptionKey, nil, infoSign)
	}
	switch {
	case len(authSecret) > 0:
		k.Sign, k.SignedBy = derive(authSecret, nil, infoSign), SignedByAuthSecret
	case len(encryptionKey) > 0:
		k.Sign, k.SignedBy = derive(encryptionKey, nil, infoSign), SignedByEncryptionKey
	}
	if len(encryptionKey) > 0 {
		k.Seal = derive(encryptionKey, nil, infoSeal)
	}
	return k
}

func derive(secret, salt []byte, info string) []byte {
	k, err := hkdf.Key(sha256.New, secret, salt, info, 32)
	if err != nil {
		panic(err) // only for a length over 255*32
	}
	return k
}

// keyCheck is what a sealed manifest records of its sealing key, so that
// a restore with another key says so instead of failing on the first file.
func keyCheck(seal []byte) string {
	m := hmac.New(sha256.New, seal)
	m.Write([]byte(infoKey))
	return hex.EncodeToString(m.Sum(nil))
}

// A sealed file is sealMagic, a random salt, then records: a 4-byte
// big-endian length and that many bytes of AES-GCM output, each sealing up
// to sealChunk bytes. The file's key is derived from the sealing key and
// the salt; a record's nonce is its number, with the first byte 1 on the
// last record, so a file cut short or grown is refused; the file's path in
// the backup is the additional data, so files cannot be swapped.
const (
	sealMagic = "FVSEAL1\n"
	saltSize  = 16
	sealChunk = chunkSize
)

// ErrSealedFile marks a sealed file that does not open: another key, or
// changed, cut short or swapped bytes.
var ErrSealedFile = errors.New("backup: a sealed file does not open")

type sealer struct {
	w     io.Writer
	aead  cipher.AEAD
	ad    []byte
	buf   []byte
	n     uint64
	nonce [12]byte
}

func newAEAD(seal, salt []byte) cipher.AEAD {
	block, err := aes.NewCipher(derive(seal, salt, infoFile))
	if err != nil {
		panic(err) // the key is 32 bytes
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// newSealer returns a writer that seals what is written to it into w,
// as the file name of the backup. Close writes the last record.
func newSealer(w io.Writer, seal []byte, name string) (*sealer, error) {
	salt := make([]byte, saltSize)
	rand.Read(salt)
	if _, err := w.Write(append([]byte(sealMagic), salt...)); err != nil {
		return nil, err
	}
	return &sealer{w: w, aead: newAEAD(seal, salt), ad: []byte(name), buf: make([]byte, 0, sealChunk)}, nil
}

func (s *sealer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(s.buf) == sealChunk {
			if err := s.record(false); err != nil {
				return n - len(p), err
			}
		}
		k := copy(s.buf[len(s.buf):sealChunk], p)
		s.buf = s.buf[:len(s.buf)+k]
		p = p[k:]
	}
	return n, nil
}

func (s *sealer) record(last bool) error {
	s.nonce = [12]byte{}
	if last {
		s.nonce[0] = 1
	}
	binary.BigEndian.PutUint64(s.nonce[4:], s.n)
	s.n++
	out := make([]byte, 4, 4+len(s.buf)+s.aead.Overhead())
	out = s.aead.Seal(out, s.nonce[:], s.buf, s.ad)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	s.buf = s.buf[:0]
	_, err := s.w.Write(out)
	return err
}

// Close seals the last record (empty when the data filled the one
// before).
func (s *sealer) Close() error { return s.record(true) }

type opener struct {
	r     *bufio.Reader
	aead  cipher.AEAD
	ad    []byte
	buf   []byte // opened bytes not yet read
	n     uint64
	done  bool
	name  string
	rec   []byte
	nonce [12]byte
}

// newOpener returns a reader of the clear bytes of the sealed file name
// read from r. Its errors are ErrSealedFile for a file that does not open.
func newOpener(r io.Reader, seal []byte, name string) (*opener, error) {
	br := bufio.NewReaderSize(r, sealChunk+64)
	head := make([]byte, len(sealMagic)+saltSize)
	if _, err := io.ReadFull(br, head); err != nil || string(head[:len(sealMagic)]) != sealMagic {
		return nil, fmt.Errorf("%w: %s is not a sealed backup file", ErrSealedFile, name)
	}
	return &opener{r: br, aead: newAEAD(seal, head[len(sealMagic):]), ad: []byte(name), name: name}, nil
}

func (o *opener) Read(p []byte) (int, error) {
	for len(o.buf) == 0 {
		if o.done {
			return 0, io.EOF
		}
		if err := o.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, o.buf)
	o.buf = o.buf[n:]
	return n, nil
}

func (o *opener) next() error {
	var hdr [4]byte
	if _, err := io.ReadFull(o.r, hdr[:]); err != nil {
		return fmt.Errorf("%w: %s is cut short", ErrSealedFile, o.name)
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size < uint32(o.aead.Overhead()) || size > sealChunk+uint32(o.aead.Overhead()) {
		return fmt.Errorf("%w: %s has a record of %d bytes", ErrSealedFile, o.name, size)
	}
	if cap(o.rec) < int(size) {
		o.rec = make([]byte, size)
	}
	rec := o.rec[:size]
	if _, err := io.ReadFull(o.r, rec); err != nil {
		return fmt.Errorf("%w: %s is cut short", ErrSealedFile, o.name)
	}
	for _, last := range []byte{0, 1} {
		o.nonce = [12]byte{last}
		binary.BigEndian.PutUint64(o.nonce[4:], o.n)
		out, err := o.aead.Open(nil, o.nonce[:], rec, o.ad)
		if err != nil {
			continue
		}
		o.n++
		o.buf = out
		if last == 1 {
			o.done = true
			if _, err := o.r.ReadByte(); err != io.EOF {
				return fmt.Errorf("%w: %s has bytes after its end", ErrSealedFile, o.name)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: record %d of %s does not decrypt (another key, or changed bytes)", ErrSealedFile, o.n, o.name)
}
