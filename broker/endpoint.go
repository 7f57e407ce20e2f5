package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Endpoint is one configured broker. Its URL carries the password, so String,
// GoString, LogValue and JSON encoding all leave it out.
type Endpoint struct {
	// Index is the position of the broker in the configuration, counted from 0.
	Index int
	// URL is the AMQP URI, credentials included. Never print or log it.
	URL string `json:"-"`
	// Host is the broker's host name, lowercased.
	Host string
	// Port is the broker's port: 5672 for amqp and 5671 for amqps unless the URL says otherwise.
	Port int
	// Vhost is the percent-decoded virtual host, "/" when the URL has no path.
	Vhost string
}

// ParseEndpoints parses broker URLs separated by commas and/or newlines, ignoring
// blank entries. Index is the position among the non-blank entries, from 0.
// It fails when there is no URL, when a URL does not parse, or when two URLs
// name the same host and vhost (FindEndpoint could not tell them apart).
// Errors name the broker by position and never contain its credentials.
// A comma inside a password must be percent-encoded (%2C).
func ParseEndpoints(s string) ([]Endpoint, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' })
	var eps []Endpoint
	for _, f := range fields {
		raw := strings.TrimSpace(f)
		if raw == "" {
			continue
		}
		ep, err := parseEndpoint(len(eps), raw)
		if err != nil {
			return nil, err
		}
		if prev, dup := FindEndpoint(eps, ep.Host, ep.Vhost); dup {
			return nil, fmt.Errorf("broker #%d: same host and vhost as broker %s", ep.Index, prev)
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, errors.New("no broker URL configured")
	}
	return eps, nil
}

func parseEndpoint(index int, raw string) (Endpoint, error) {
	if strings.Contains(afterAuthority(raw), "@") {
		// url.Parse would end the authority at that '/', '?' or '#' and take part of the
		// password for the host, the port or the vhost, where errors and logs show it.
		return Endpoint{}, fmt.Errorf("broker #%d: an '@' follows the end of the host (a '/', '?' or '#'): "+
			"percent-encode '/', '?', '#' and '@' in the user name, password and vhost (%%2F, %%3F, %%23, %%40)", index)
	}
	uri, err := amqp.ParseURI(raw)
	if err != nil {
		// url.Parse errors quote the whole URL, password included: keep only the cause.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return Endpoint{}, fmt.Errorf("broker #%d: %s (percent-encode reserved characters in the user name and password)",
			index, unquoted(err.Error()))
	}
	return Endpoint{
		Index: index,
		URL:   raw,
		Host:  strings.ToLower(uri.Host),
		Port:  uri.Port,
		Vhost: uri.Vhost,
	}, nil
}

// afterAuthority is what follows the first '/', '?' or '#' after the scheme of raw.
func afterAuthority(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		rest = raw
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return rest[i:]
	}
	return ""
}

// quoted matches a string quoted by Go's %q or strconv.Quote.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// unquoted removes every quoted string from an error text. The errors of url.Parse,
// strconv and amqp091-go quote the piece of the URL they stumbled on, which may be part
// of a password when a reserved character in it was not encoded, or when a comma split
// it: none is kept, whatever it is.
func unquoted(msg string) string {
	return quoted.ReplaceAllString(msg, `"…"`)
}

// Redact removes every broker's URL, userinfo and password from text. A text that leaves
// the process's memory (a log line, a row in Postgres, a workflow's history) and comes
// from a broker client goes through it where it is made, with the worker's own broker
// list, the one that holds the credentials.
func Redact(text string, eps []Endpoint) string {
	for _, ep := range eps {
		text = redact(text, ep.URL)
	}
	return text
}

// redact removes the userinfo of raw, a URL that parsed, from msg.
func redact(msg, raw string) string {
	secrets := []string{raw}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		secrets = append(secrets, u.User.String())
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
	}
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// String names the broker for logs and errors, e.g. "#1 host:5672/vhost", without credentials.
func (e Endpoint) String() string {
	vhost := ""
	if e.Vhost != "/" {
		vhost = url.PathEscape(e.Vhost)
	}
	return fmt.Sprintf("#%d %s/%s", e.Index, net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), vhost)
}

// GoString keeps %#v from printing the URL.
func (e Endpoint) GoString() string {
	return "broker.Endpoint(" + e.String() + ")"
}

// LogValue makes slog log the endpoint as its String, never its URL.
func (e Endpoint) LogValue() slog.Value {
	return slog.StringValue(e.String())
}

// matches reports whether the endpoint is the broker with this host (case-insensitive)
// and vhost (percent-encoded or not; "" means "/").
func (e Endpoint) matches(host, vhost string) bool {
	return strings.EqualFold(e.Host, host) && e.Vhost == normalizeVhost(vhost)
}

func normalizeVhost(vhost string) string {
	if dec, err := url.PathUnescape(vhost); err == nil {
		vhost = dec
	}
	if vhost == "" {
		return "/"
	}
	return vhost
}

// FindEndpoint returns the endpoint that matches host and vhost.
func FindEndpoint(eps []Endpoint, host, vhost string) (Endpoint, bool) {
	for _, ep := range eps {
		if ep.matches(host, vhost) {
			return ep, true
		}
	}
	return Endpoint{}, false
}
