package stalls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Kill is one kill to measure.
type Kill struct {
	Killed, End time.Time
	// Victim holds the agents in the victim's share (owned by it, or in
	// a shard it led).
	Victim map[string]bool
	// Active: an agent with no event within Active before the kill was
	// not writing and is not counted. Limit: a longer stall counts.
	Active, Limit time.Duration
	// ResumeAfterEnd takes a victim's agent's first event after the kill
	// as its resumption even past End.
	ResumeAfterEnd bool
}

// Result is what a kill did to the agents writing when it came.
type Result struct {
	Victims, Others               int
	VictimsStalled, OthersStalled int
	WorstOther                    time.Duration
	WorstOtherAgent               string
	// SlowestResume is the longest kill to first event of a victim's
	// agent; Unresumed counts those without one.
	SlowestResume time.Duration
	Unresumed     int
}

// Measure measures agents by the stored times of their events (sorted
// here, in place), as the package doc says.
func Measure(agents []string, times map[string][]time.Time, k Kill) Result {
	var r Result
	for _, a := range agents {
		ts := times[a]
		slices.SortFunc(ts, time.Time.Compare)
		i, _ := slices.BinarySearchFunc(ts, k.Killed, time.Time.Compare)
		if i == 0 || k.Killed.Sub(ts[i-1]) > k.Active {
			continue // not writing when the kill came
		}
		prev, worst := ts[i-1], time.Duration(0)
		for _, t := range ts[i:] {
			if t.After(k.End) {
				break
			}
			worst = max(worst, t.Sub(prev))
			prev = t
		}
		worst = max(worst, k.End.Sub(prev))
		stalled := worst > k.Limit
		if k.Victim[a] {
			r.Victims++
			if stalled {
				r.VictimsStalled++
			}
			resumed := time.Duration(-1)
			if i < len(ts) && (k.ResumeAfterEnd || !ts[i].After(k.End)) {
				resumed = ts[i].Sub(k.Killed)
			}
			if resumed < 0 {
				r.Unresumed++
				resumed = k.End.Sub(k.Killed)
			}
			r.SlowestResume = max(r.SlowestResume, resumed)
			continue
		}
		r.Others++
		if stalled {
			r.OthersStalled++
		}
		if worst > r.WorstOther {
			r.WorstOther, r.WorstOtherAgent = worst, a
		}
	}
	return r
}

// Stored reads the stored times of the events on each stream's subjects
// (byStream; an agent is its subject's last token) from from on, up to
// about to (zero: to the stream's end), trying again up to 10 times a
// second apart when a stream answers an error (its leader electing).
func Stored(ctx context.Context, js jetstream.JetStream, byStream map[string][]string, from, to time.Time) (map[string][]time.Time, error) {
	var err error
	for range 10 {
		var out map[string][]time.Time
		if out, err = storedOnce(ctx, js, byStream, from, to); err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second): // not a synchronisation: a retry's pause
		}
	}
	return nil, err
}

func storedOnce(ctx context.Context, js jetstream.JetStream, byStream map[string][]string, from, to time.Time) (map[string][]time.Time, error) {
	out := map[string][]time.Time{}
	for stream, subjects := range byStream {
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
		})
		if err != nil {
			return nil, fmt.Errorf("read the stall agents' events on %s: %w", stream, err)
		}
		for done := false; !done; {
			batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return nil, fmt.Errorf("read the stall agents' events on %s: %w", stream, err)
			}
			n := 0
			for msg := range batch.Messages() {
				n++
				md, err := msg.Metadata()
				if err != nil {
					continue
				}
				sub := msg.Subject()
				agent := sub[strings.LastIndexByte(sub, '.')+1:]
				out[agent] = append(out[agent], md.Timestamp)
				if (!to.IsZero() && md.Timestamp.After(to)) || md.NumPending == 0 {
					done = true
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return nil, fmt.Errorf("read the stall agents' events on %s: %w", stream, err)
			}
			done = done || n == 0
		}
	}
	return out, nil
}
