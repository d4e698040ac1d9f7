package replay

import "time"

// OriginAllowed exports originAllowed for the tests.
var OriginAllowed = originAllowed

// SetLiveTimes sets a live Client's poll times (WithLive: livePoll,
// liveMaxPoll), so a test of its reads does not wait seconds.
func SetLiveTimes(c *Client, poll, max time.Duration) { c.livePoll, c.liveMaxPoll = poll, max }
