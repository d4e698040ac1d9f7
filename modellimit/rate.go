package modellimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidConfig is returned by New, Config.Validate and ParseRate for
// a limit that cannot be used.
var ErrInvalidConfig = errors.New("modellimit: invalid config")

// Rate is an amount per period: 10 calls a second, 90000 tokens a minute.
// The zero Rate is no limit.
type Rate struct {
	N   float64
	Per time.Duration
}

// ParseRate reads "N/s", "N/m", "N/h" or "N/<duration>" ("5/2s",
// "100/30s"). "" and "0" are the zero Rate (no limit).
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Rate{}, nil
	}
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("%w: rate %q: give N/s, N/m or N/<duration>, such as 10/s or 90000/m", ErrInvalidConfig, s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return Rate{}, fmt.Errorf("%w: rate %q: %q is not a number of at least 0", ErrInvalidConfig, s, num)
	}
	var d time.Duration
	switch per = strings.TrimSpace(per); per {
	case "s":
		d = time.Second
	case "m", "min":
		d = time.Minute
	case "h":
		d = time.Hour
	default:
		d, err = time.ParseDuration(per)
		if err != nil || d <= 0 {
			return Rate{}, fmt.Errorf("%w: rate %q: the period %q is not s, m, h or a positive duration", ErrInvalidConfig, s, per)
		}
	}
	if n == 0 {
		return Rate{}, nil
	}
	return Rate{N: n, Per: d}, nil
}

// String writes r as ParseRate reads it; "0" for the zero Rate.
func (r Rate) String() string {
	if r.IsZero() {
		return "0"
	}
	n := strconv.FormatFloat(r.N, 'f', -1, 64)
	switch r.Per {
	case time.Second:
		return n + "/s"
	case time.Minute:
		return n + "/m"
	case time.Hour:
		return n + "/h"
	}
	return n + "/" + r.Per.String()
}

// IsZero reports whether r is no limit.
func (r Rate) IsZero() bool { return r.N <= 0 || r.Per <= 0 }

// PerSecond is r in units a second; 0 for the zero Rate.
func (r Rate) PerSecond() float64 {
	if r.IsZero() {
		return 0
	}
	return r.N / r.Per.Seconds()
}

// MarshalText writes r as String does, for flags and JSON.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads r as ParseRate does.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
