// Package operator is the operator's commands of the brokerswitch binary, `errors` and
// `status`: each reads or orders through the HTTP API, with the operator token, and
// prints for a person or, with -o json, the API's own answer for a script.
package operator

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Getenv reads an environment variable; os.Getenv fits.
type Getenv func(string) string

// defaultAPI is the API the commands talk to unless -api or BROKERSWITCH_API says otherwise.
const defaultAPI = "http://127.0.0.1:8080"

// requestTimeout bounds a read; a requeue or purge runs as long as it needs (its rate),
// and Ctrl-C stops it.
const requestTimeout = 30 * time.Second

// client talks to the API with the operator token.
type client struct {
	base  string
	token string
	http  *http.Client
}

// connection is the flags every command takes to reach the API.
type connection struct {
	api, token, output *string
}

func connectionFlags(fs *flag.FlagSet, getenv Getenv) connection {
	api := getenv("BROKERSWITCH_API")
	if api == "" {
		api = defaultAPI
	}
	return connection{
		api:    fs.String("api", api, "the API's base URL (default $BROKERSWITCH_API, else "+defaultAPI+")"),
		token:  fs.String("token", getenv("OPERATOR_TOKEN"), "operator token (default $OPERATOR_TOKEN)"),
		output: fs.String("o", "text", "output: text for a person, json for a script (the API's answer as it is)"),
	}
}

func (c connection) client() (*client, error) {
	if *c.output != "text" && *c.output != "json" {
		return nil, fmt.Errorf("-o %q: want text or json", *c.output)
	}
	u, err := url.Parse(*c.api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-api %q: want an http:// or https:// URL", *c.api)
	}
	return &client{base: strings.TrimRight(*c.api, "/"), token: *c.token, http: &http.Client{}}, nil
}

func (c connection) json() bool { return *c.output == "json" }

// apiError is an answer of the API other than 200.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("the API answered %d: %s", e.Status, e.Message)
}

// do sends a request and returns the body of a 200; long lifts the read's time bound.
func (c *client) do(ctx context.Context, method, path string, body any, long bool) ([]byte, error) {
	if !long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		if res.StatusCode == http.StatusUnauthorized {
			e.Error += " (set OPERATOR_TOKEN or -token)"
		}
		return nil, &apiError{Status: res.StatusCode, Message: e.Error}
	}
	return b, nil
}

// get decodes the answer of a GET into v and returns its body too, for -o json.
func (c *client) get(ctx context.Context, path string, v any) ([]byte, error) {
	b, err := c.do(ctx, http.MethodGet, path, nil, false)
	if err != nil {
		return nil, err
	}
	return b, json.Unmarshal(b, v)
}
