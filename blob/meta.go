package blob

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An object's meta message (the Object Store's "$O.<bucket>.M.<name>",
// rolled up to one per object) is where a touch and a sweep meet: both
// store it again only if it is still the message they read (JetStream's
// expected last sequence per subject), so a Put that touches an object
// and a sweep that deletes it never both succeed on the same message. A
// Put whose touch loses stores the bytes again, and a sweep whose delete
// loses keeps the object.

func (s *Store) metaSubject(name string) string {
	return "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// meta is an object's last meta message.
type meta struct {
	info jetstream.ObjectInfo
	seq  uint64
	at   time.Time // when it was stored: the object's put or last touch
}

// readMeta returns name's last meta message, ok false when it has none.
func (s *Store) readMeta(ctx context.Context, name string) (meta, bool, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.metaSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return meta{}, false, nil
	}
	if err != nil {
		return meta{}, false, err
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return meta{}, false, fmt.Errorf("%w: meta of %s: %w", ErrMismatch, name, err)
	}
	return meta{info: info, seq: m.Sequence, at: m.Time}, true, nil
}

// publishMeta stores info as name's meta message if its last one is still
// at seq; ok false when another got there first.
func (s *Store) publishMeta(ctx context.Context, name string, info jetstream.ObjectInfo, seq uint64) (bool, error) {
	info.ModTime = time.Time{} // the message's time is the object's
	data, err := json.Marshal(info)
	if err != nil {
		return false, err
	}
	msg := nats.NewMsg(s.metaSubject(name))
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	msg.Data = data
	_, err = s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(seq))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return false, nil
	}
	return err == nil, err
}

// touch stores the meta message of an object of size bytes again, so its
// age starts now; ok false when there is no such object (none, deleted,
// another size) or it changed under the touch: then the caller stores the
// bytes.
func (s *Store) touch(ctx context.Context, name string, size int64) (bool, error) {
	m, ok, err := s.readMeta(ctx, name)
	if err != nil || !ok || m.info.Deleted || m.info.NUID == "" || int64(m.info.Size) != size {
		return false, err
	}
	return s.publishMeta(ctx, name, m.info, m.seq)
}

// Object is a stored object as Objects lists it.
type Object struct {
	Ref
	// Touched is when the object was last put or touched (a Put of the
	// same bytes), by the server's clock.
	Touched time.Time
}

// Objects returns every object of the bucket with when it was last put.
func (s *Store) Objects(ctx context.Context) ([]Object, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	infos, err := s.os.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("blob: list: %w", err)
	}
	out := make([]Object, 0, len(infos))
	for _, in := range infos {
		if in.Deleted {
			continue
		}
		out = append(out, Object{Ref: Ref{Digest: DigestPrefix + in.Name, Size: int64(in.Size)}, Touched: in.ModTime})
	}
	return out, nil
}

// DeleteUntouched deletes the object r names if it was last put or
// touched before cutoff, and reports whether it did: false when it is not
// there, was touched at or after cutoff, or a Put touched it while it was
// being deleted (that Put keeps it). Its bytes are purged after its meta
// message says it is deleted.
func (s *Store) DeleteUntouched(ctx context.Context, r Ref, cutoff time.Time) (bool, error) {
	name, err := r.Name()
	if err != nil {
		return false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	m, ok, err := s.readMeta(ctx, name)
	if err != nil {
		return false, fmt.Errorf("blob: delete %s: %w", r.Digest, err)
	}
	if !ok || m.info.Deleted || !m.at.Before(cutoff) {
		return false, nil
	}
	nuid := m.info.NUID
	info := m.info
	info.Deleted = true
	info.Size, info.Chunks, info.Digest = 0, 0, ""
	if ok, err := s.publishMeta(ctx, name, info, m.seq); err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("blob: delete %s: %w", r.Digest, err)
		}
		return false, err
	}
	if nuid != "" {
		chunks := "$O." + s.bucket + ".C." + nuid
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(chunks)); err != nil {
			return true, fmt.Errorf("blob: delete %s: purge its chunks: %w", r.Digest, err)
		}
	}
	return true, nil
}
