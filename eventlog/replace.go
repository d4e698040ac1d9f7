package eventlog

import "encoding/json"

// Replace swaps the data of p, an event this Batcher queued and has not yet
// taken into a batch, for data, and reports whether it did. Once Run took p
// into a batch it changes nothing and returns false, and so it always does
// under Config.AsyncBatches, where Add publishes at once: the caller then
// adds a new event instead. Bad data (ErrInvalid, ErrTooLarge) is returned
// with false and changes nothing.
//
// A writer that folds each write into the last event it queued while the
// batch before is being stored (a chat stream merging the text deltas of a
// burst) stores fewer, larger events under load and exactly the events it
// would have stored when idle: p is never sent half replaced, because Run
// takes p (seals it) before it reads it.
func (b *Batcher) Replace(p *Pending, data json.RawMessage) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.sealed {
		return false, nil
	}
	e := p.e
	e.Data = data
	if err := e.validate(); err != nil {
		return false, err
	}
	// The body is built once, by seal, not at every Replace: a chat stream
	// replaces its tail record at each merged delta, and encoding the whole
	// record each time cost as much as validating it. Its size is known
	// without building it: encode appends the data as it is.
	if err := b.l.fitsSize(&e, p.msg.Subject, p.envSize+dataSize(data)); err != nil {
		return false, err
	}
	p.e.Data, p.replaced = data, true
	return true, nil
}

// seal marks p taken into a batch: Replace no longer changes it, and what
// Replace changed before is visible to the caller, its message's body
// built from the last data Replace took.
func (p *Pending) seal() {
	p.mu.Lock()
	p.mu.sealed = true
	if p.replaced {
		p.msg.Data, _ = p.e.encode() // encode fails on nothing validate passed
		p.replaced = false
	}
	p.mu.Unlock()
}
