package replay

import "time"

// OriginAllowed exports originAllowed for the tests.
var OriginAllowed = originAllowed

// SetLiveTimes sets a live Client's poll and idle times (WithLive: livePoll,
// liveIdle), so a test of the fallback does not wait seconds.
func SetLiveTimes(c *Client, poll, idle time.Duration) { c.livePoll, c.liveIdle = poll, idle }
