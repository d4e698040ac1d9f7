package backup

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"
)

// sealBytes seals data as the file name with key.
func sealBytes(t *testing.T, key []byte, name string, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	s, err := newSealer(&out, key, name)
	if err != nil {
		t.Fatal(err)
	}
	// In uneven writes, as snapshot chunks arrive.
	for p := data; len(p) > 0; {
		n := min(len(p), 1000+len(p)%7919)
		if _, err := s.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func openBytes(key []byte, name string, sealed []byte) ([]byte, error) {
	o, err := newOpener(bytes.NewReader(sealed), key, name)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(o)
}

// TestSealOpen: sealed data opens to itself with its key and name, at
// every size around a record's; with another key, another name, a byte
// changed, cut short or grown, it is refused (ErrSealedFile), never
// returned in part as the whole.
func TestSealOpen(t *testing.T) {
	key := NewKeys(nil, bytes.Repeat([]byte("k"), 40)).Seal
	other := NewKeys(nil, bytes.Repeat([]byte("o"), 40)).Seal
	for _, size := range []int{0, 1, sealChunk - 1, sealChunk, sealChunk + 1, 3*sealChunk + 17} {
		data := make([]byte, size)
		rand.Read(data)
		sealed := sealBytes(t, key, "agentd/FOREVER_EVENTS.snap", data)
		if got, err := openBytes(key, "agentd/FOREVER_EVENTS.snap", sealed); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: opened %d bytes, %v", size, len(got), err)
		}
		if size > 64 && bytes.Contains(sealed, data[:64]) {
			t.Fatalf("%d bytes: the sealed file holds the clear bytes", size)
		}
		bad := map[string]func() ([]byte, error){
			"another key":  func() ([]byte, error) { return openBytes(other, "agentd/FOREVER_EVENTS.snap", sealed) },
			"another name": func() ([]byte, error) { return openBytes(key, "agentd/FOREVER_CHUNKS.snap", sealed) },
			"a byte changed": func() ([]byte, error) {
				b := bytes.Clone(sealed)
				b[len(b)-1] ^= 1
				return openBytes(key, "agentd/FOREVER_EVENTS.snap", b)
			},
			"grown": func() ([]byte, error) {
				return openBytes(key, "agentd/FOREVER_EVENTS.snap", append(bytes.Clone(sealed), 0))
			},
		}
		// Cut at every record boundary and inside the records.
		for _, cut := range []int{len(sealed) - 1, len(sealed) - 16, len(sealed) / 2, len(sealMagic) + saltSize, 3} {
			if cut <= 0 || cut >= len(sealed) {
				continue
			}
			bad["cut short"] = func() ([]byte, error) { return openBytes(key, "agentd/FOREVER_EVENTS.snap", sealed[:cut]) }
			if _, err := bad["cut short"](); !errors.Is(err, ErrSealedFile) {
				t.Fatalf("%d bytes cut to %d: %v, want ErrSealedFile", size, cut, err)
			}
		}
		if size >= sealChunk+1 {
			// Only whole records of the first: the last record's mark is missing.
			first := len(sealMagic) + saltSize + 4 + sealChunk + 16
			if _, err := openBytes(key, "agentd/FOREVER_EVENTS.snap", sealed[:first]); !errors.Is(err, ErrSealedFile) {
				t.Fatalf("%d bytes cut after the first record: %v, want ErrSealedFile", size, err)
			}
		}
		for name, open := range bad {
			if _, err := open(); !errors.Is(err, ErrSealedFile) {
				t.Fatalf("%d bytes, %s: %v, want ErrSealedFile", size, name, err)
			}
		}
	}
}

// FuzzOpenSealed: any bytes given to the opener end in an error or in
// clear bytes, never a panic; what opens was sealed with the key.
func FuzzOpenSealed(f *testing.F) {
	key := NewKeys(nil, bytes.Repeat([]byte("k"), 40)).Seal
	var buf bytes.Buffer
	s, _ := newSealer(&buf, key, "f")
	s.Write([]byte("hello"))
	s.Close()
	f.Add(buf.Bytes())
	f.Add([]byte(sealMagic + "0123456789abcdef\x00\x00\x00\x10"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := newOpener(bytes.NewReader(b), key, "f")
		if err != nil {
			return
		}
		if _, err := io.ReadAll(o); err != nil && !errors.Is(err, ErrSealedFile) {
			t.Fatalf("error %v is not ErrSealedFile", err)
		}
	})
}
