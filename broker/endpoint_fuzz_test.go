package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// FuzzParseEndpointsKeepsThePassword builds broker URLs around a password holding any
// characters, the reserved ones unencoded among them, and checks that no error text, log
// line or printed form of what ParseEndpoints returns carries the password or any piece
// of it between those characters.
func FuzzParseEndpointsKeepsThePassword(f *testing.F) {
	for _, seed := range []struct{ user, pw, rest string }{
		{"user", "s3cr/etpw", "host/"},
		{"user", "s3cr#etpw", "host/"},
		{"user", "s3cr?etpw", "host/vh"},
		{"user", "s3cr@etpw", "host/vh"},
		{"user", "s3cr%etpw", "host/vh"},
		{"user", "s3cr%zzetpw", "host/vh"},
		{"user", "1234/etpw", "host/vh"},
		{"user", "s3cr,etpw", "host/vh"},
		{"user", "s3cr,amqp://etpw", "host/vh"},
		{"user", "1234,etpw", "host/vh"},
		{"user", "s3cr:etpw", "host:99999999/vh"},
		{"user", "s3cretpw", "ho%zzst/vh"},
		{"user", "s3cretpw", "host/vh?heartbeat=x"},
		{"user", "s3cr etpw", "host/vh"},
		{"us/er", "s3cretpw", "host/vh"},
	} {
		f.Add(seed.user, seed.pw, seed.rest)
	}
	f.Fuzz(func(t *testing.T, user, pw, rest string) {
		raw := "amqp://" + user + ":" + pw + "@" + rest
		texts := printedForms(raw)
		// A text that the same URL gives with another password holds the piece for
		// another reason (the piece is "host", or "invalid"): it is no leak.
		innocent := strings.Join(printedForms("amqp://"+user+":x@"+rest), "\n") + user + rest
		for _, piece := range passwordPieces(pw) {
			if strings.Contains(innocent, piece) {
				continue
			}
			for _, text := range texts {
				if strings.Contains(text, piece) {
					t.Fatalf("%q carries %q, part of the password %q", text, piece, pw)
				}
			}
		}
	})
}

// printedForms are the error, or every printed form of the endpoints, of ParseEndpoints(raw).
func printedForms(raw string) []string {
	eps, err := ParseEndpoints(raw)
	if err != nil {
		return []string{err.Error()}
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	var out []string
	for _, ep := range eps {
		logger.Info("x", "broker", ep)
		js, _ := json.Marshal(ep)
		out = append(out, string(js), fmt.Sprintf("%v %+v %#v %s", ep, ep, ep, ep))
	}
	return append(out, logs.String())
}

// passwordPieces are the pieces of pw between reserved URL characters, and pw whole,
// that are long enough not to show up by chance (4 characters or more).
func passwordPieces(pw string) []string {
	pieces := strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("/#?@%:,; \t\r\n", r) })
	var out []string
	for _, p := range append(pieces, pw) {
		if len(p) >= 4 {
			out = append(out, p)
		}
	}
	return out
}
