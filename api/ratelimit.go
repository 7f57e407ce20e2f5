package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// notificationLimiter bounds notifications per token: each one costs a transaction under
// the state's advisory lock, a NOTIFY that every worker answers with a read, and a signal.
// Each role has one token, so a bucket per role is a bucket per token.
type notificationLimiter struct {
	perSecond float64
	burst     int
	now       func() time.Time

	mu      sync.Mutex
	buckets map[role]*rate.Limiter
}

// newNotificationLimiter returns nil, no limit, when perSecond is 0.
func newNotificationLimiter(perSecond float64, burst int, now func() time.Time) *notificationLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &notificationLimiter{perSecond: perSecond, burst: max(burst, 1), now: now, buckets: map[role]*rate.Limiter{}}
}

// wait reports how long the caller of role r must wait before its next notification is
// taken: 0 takes this one now.
func (l *notificationLimiter) wait(r role) time.Duration {
	l.mu.Lock()
	b, ok := l.buckets[r]
	if !ok {
		b = rate.NewLimiter(rate.Limit(l.perSecond), l.burst)
		l.buckets[r] = b
	}
	l.mu.Unlock()
	now := l.now()
	res := b.ReserveN(now, 1)
	delay := res.DelayFrom(now)
	if delay > 0 {
		// Refused: the token goes back, so that a producer that keeps retrying too early
		// is not pushed further back each time.
		res.CancelAt(now)
	}
	return delay
}

// limitNotifications answers 429 with Retry-After, in whole seconds, to a token that
// sends notifications faster than NOTIFICATION_RATE allows beyond NOTIFICATION_BURST.
// Nothing is recorded or signalled for a refused one: the producer sends it again.
func (s *server) limitNotifications(c *gin.Context) {
	if s.notifyLimit == nil {
		c.Next()
		return
	}
	delay := s.notifyLimit.wait(s.auth.roleOf(c.GetHeader("Authorization")))
	if delay <= 0 {
		c.Next()
		return
	}
	seconds := int(math.Ceil(delay.Seconds()))
	c.Header("Retry-After", strconv.Itoa(seconds))
	s.fail(c, http.StatusTooManyRequests, fmt.Sprintf(
		"too many notifications: at most %g a second with bursts of %d; nothing was recorded, send it again after %d s",
		s.notifyLimit.perSecond, s.notifyLimit.burst, seconds))
}
