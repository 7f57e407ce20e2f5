package ingest

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
)

// maxNesting is the deepest nesting of arrays and objects a body may have. GitHub's
// payloads nest at most 7 deep (the vendored examples); the decoder recurses once per
// level without a limit of its own, so a body of a few megabytes of "[" would overflow
// the goroutine stack: a fatal error that no recover catches. The process would die, and
// the message, back at the head of its queue, would kill the next worker too.
const maxNesting = 64

// checkShape refuses, before any decoding, a body the decoder must not be given: one
// that is not UTF-8 (RFC 8259 requires it, and Postgres would refuse its strings on
// every retry) or one nested deeper than maxNesting. It reads the body once, without
// recursion or allocation, so its cost is linear in the body's size, which
// MAX_MESSAGE_BYTES bounds.
//
// It tracks strings only to skip the brackets inside them; everything else is left to
// the decoder, which reads a body from left to right and stops at the first byte that is
// not JSON, so it never reaches a level this scan did not count.
func checkShape(body []byte) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: body is not valid UTF-8 (first invalid byte at offset %d)", ErrMalformed, invalidUTF8At(body))
	}
	depth := 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			end := stringEnd(body, i+1)
			if end < 0 {
				return nil // unterminated: the decoder says where
			}
			i = end
		case '[', '{':
			if depth++; depth > maxNesting {
				return fmt.Errorf("%w: body nests arrays and objects deeper than %d levels (at byte %d)", ErrMalformed, maxNesting, i)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// stringEnd returns the index of the quote that closes the string whose first byte is at
// from, or -1 when the body ends first.
func stringEnd(body []byte, from int) int {
	for i := from; i < len(body); {
		j := bytes.IndexAny(body[i:], `"\`)
		if j < 0 {
			return -1
		}
		i += j
		if body[i] == '"' {
			return i
		}
		i += 2 // the backslash and the byte it escapes
	}
	return -1
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// minListedRepositoryBytes is the fewest body bytes per element of a repository list:
// GitHub's elements always carry id, node_id, name, full_name and private, whose keys and
// punctuation alone take 61 bytes.
const minListedRepositoryBytes = 64

// repositoryList is a payload's list of repositories (an installation's). Decoded as a
// plain []repository, a body of 3-byte "{}," elements would take 150 times its size,
// 3.8 GB for a 25 MB message. A list of more elements than one per minListedRepositoryBytes is
// refused before any is decoded, and the rest fill a slice made to size once: a list
// takes at most 176/64 times its bytes.
type repositoryList []repository

// UnmarshalJSON keeps the elements that have an id, in order. The decoder hands it one
// whole JSON value, already checked, so the elements are cut out by their brackets alone;
// decoding each with json.Parse on the rest of the list would take time quadratic in its
// length.
func (l *repositoryList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != '[' {
		var raw []json.RawMessage // the decoder's own words for null or a mismatch
		err := json.Unmarshal(b, &raw)
		*l = nil
		return err
	}
	n := 0
	eachElement(b, func([]byte) { n++ })
	if n*minListedRepositoryBytes > len(b) {
		return fmt.Errorf("repository list of %d elements in %d bytes: more than one per %d bytes, which GitHub never sends",
			n, len(b), minListedRepositoryBytes)
	}
	out := make([]repository, 0, n)
	var err error
	r := new(repository) // one for all elements: a new one each would cost its size again
	eachElement(b, func(elem []byte) {
		if err != nil {
			return
		}
		*r = repository{}
		if err = json.Unmarshal(elem, r); err == nil && r.ID != 0 {
			out = append(out, *r)
		}
	})
	if err != nil {
		return err
	}
	*l = out
	return nil
}

// eachElement calls f with each element of the JSON array b, in order.
func eachElement(b []byte, f func(elem []byte)) {
	for i := 1; ; {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] == ']' {
			return
		}
		end := valueEnd(b, i)
		f(b[i:end])
		if i = skipSpace(b, end); i < len(b) && b[i] == ',' {
			i++
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value that starts at b[i], in a document
// already known to be valid.
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			if i = stringEnd(b, i+1); i < 0 {
				return len(b)
			}
			if depth == 0 {
				return i + 1
			}
		case '[', '{':
			depth++
		case ']', '}':
			if depth == 0 {
				return i // the end of a scalar, at the list's closing bracket
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i // the end of a scalar
			}
		}
	}
	return len(b)
}
