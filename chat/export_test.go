package chat

import (
	"context"
	"time"
)

// StopAt makes a's turns call stop at each named crash point of a step
// ("tools-stashed", "tools-begin", "tool-recorded", "step-done", "ending", "ended") and of a command
// that starts a turn ("send-begin", "send-checked", "send-turn-stored",
// "send-stored"), of a recovery ("recover-claim") and of a sub-agent call
// ("child-started", "children-wait");
// stop returns nil to go on, or blocks until ctx ends and returns its
// error, as a process dying there.
func StopAt(a *Agent, stop func(ctx context.Context, point string) error) { a.stopAt = stop }

// SetMaxMerged bounds the messages a batch's turn takes (merge, debounce)
// at n instead of 100.
func SetMaxMerged(a *Agent, n int) { a.maxMerged = n }

// Acquire and Release take and give back a slot of l, as a turn does.
func (l *TurnLimiter) Acquire(force bool) error { return l.acquire(force) }
func (l *TurnLimiter) Release()                 { l.release() }

// MessageTokens is the estimate of m's tokens a context budget counts.
func MessageTokens(m Message) int { return messageTokens(m) }

// SummaryHeader introduces the summary in a model call's system prompt.
const SummaryHeader = summaryHeader

// BudgetSpendAllRows is the tenant's spend read from every agent's rows,
// not from the totals.
func (s *Store) BudgetSpendAllRows(since time.Time) (BudgetSpend, error) {
	return s.budgetSpendAllRows(since)
}

// OnSlotMisuse makes a call f when a turn slot is released twice or not
// released by its owner.
func OnSlotMisuse(a *Agent, f func(requestID, what string)) { a.onSlotMisuse = f }

// HistoryUncached is History decoding every row, without the history
// cache.
func (s *Store) HistoryUncached(agent string) ([]Message, error) { return s.history(agent, nil, false) }

// HistoryCacheHits is the number of rows History took from its cache.
func (s *Store) HistoryCacheHits() uint64 { return s.hist.hits.Load() }
