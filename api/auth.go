package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// role is what a caller may do; a higher role may do everything a lower one may.
type role int

const (
	roleNone role = iota
	// roleProducer may only post pending-switch notifications.
	roleProducer
	// roleOperator may do everything.
	roleOperator
)

// authenticator tells a caller's role from its token. Only digests of the tokens are
// kept, so that a dump of the server struct cannot show them.
type authenticator struct {
	// open is development mode: no token configured and API_INSECURE_NO_AUTH set.
	open     bool
	operator *[sha256.Size]byte
	producer *[sha256.Size]byte
}

func newAuthenticator(cfg Settings) authenticator {
	a := authenticator{open: cfg.InsecureNoAuth && cfg.OperatorToken == "" && cfg.ProducerToken == ""}
	if cfg.OperatorToken != "" {
		d := sha256.Sum256([]byte(cfg.OperatorToken))
		a.operator = &d
	}
	if cfg.ProducerToken != "" {
		d := sha256.Sum256([]byte(cfg.ProducerToken))
		a.producer = &d
	}
	return a
}

// roleOf returns the role the Authorization header proves, roleNone when it proves none.
// Tokens are compared as SHA-256 digests in constant time: ConstantTimeCompare alone
// returns early on a length mismatch and would tell the token's length.
func (a authenticator) roleOf(header string) role {
	if a.open {
		return roleOperator
	}
	token, ok := bearerToken(header)
	if !ok {
		return roleNone
	}
	got := sha256.Sum256([]byte(token))
	// Both comparisons always run, so that timing does not tell which token matched.
	isOperator := a.operator != nil && subtle.ConstantTimeCompare(got[:], a.operator[:]) == 1
	isProducer := a.producer != nil && subtle.ConstantTimeCompare(got[:], a.producer[:]) == 1
	switch {
	case isOperator:
		return roleOperator
	case isProducer:
		return roleProducer
	}
	return roleNone
}

// bearerToken reads "Bearer <token>" or "token <token>" (GitHub's form, which the
// producer's HTTP client may use); the scheme is case-insensitive.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok {
		return "", false
	}
	if !strings.EqualFold(scheme, "Bearer") && !strings.EqualFold(scheme, "token") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// require lets the request through only with a token of at least role want.
func (s *server) require(want role) gin.HandlerFunc {
	return func(c *gin.Context) {
		got := s.auth.roleOf(c.GetHeader("Authorization"))
		switch {
		case got == roleNone:
			c.Header("WWW-Authenticate", `Bearer realm="brokerswitch"`)
			s.fail(c, http.StatusUnauthorized, "missing or invalid token: send Authorization: Bearer <token>")
		case got < want:
			s.fail(c, http.StatusForbidden, "this token may only post pending-switch notifications")
		default:
			c.Next()
		}
	}
}
