package ingest

import (
	"github.com/google/go-github/v75/github"
)

// payload holds the fields of a webhook payload that the tables store, for every event
// with a table: decoding only these is a fraction of the cost of go-github's full types
// (BENCHMARKS.md). Events fill the parts they have; validate checks each event's keys.
type payload struct {
	Action       string       `json:"action"`
	Sender       *account     `json:"sender"`
	Repository   repository   `json:"repository"`
	Installation installation `json:"installation"`
	Number       int          `json:"number"`
	PullRequest  pullRequest  `json:"pull_request"`
	Issue        issue        `json:"issue"`
	Comment      comment      `json:"comment"`
	Review       review       `json:"review"`
	Ref          string       `json:"ref"`
	RefType      string       `json:"ref_type"`
	MasterBranch string       `json:"master_branch"`
	PusherType   string       `json:"pusher_type"`
	Before       string       `json:"before"`
	After        string       `json:"after"`
	BaseRef      string       `json:"base_ref"`
	Commits      []struct{}   `json:"commits"`
	HeadCommit   struct {
		ID string `json:"id"`
	} `json:"head_commit"`
	Created bool   `json:"created"`
	Deleted bool   `json:"deleted"`
	Forced  bool   `json:"forced"`
	Compare string `json:"compare"`
	Pusher  struct {
		Name string `json:"name"`
	} `json:"pusher"`
	// RepositorySelection is installation_repositories' top-level selection.
	RepositorySelection string         `json:"repository_selection"`
	Repositories        repositoryList `json:"repositories"`
	RepositoriesAdded   repositoryList `json:"repositories_added"`
	RepositoriesRemoved repositoryList `json:"repositories_removed"`
}

// account is a user or organization: a sender, an author, an owner.
type account struct {
	ID        int64  `json:"id"`
	NodeID    string `json:"node_id"`
	Login     string `json:"login"`
	Type      string `json:"type"`
	SiteAdmin bool   `json:"site_admin"`
	HTMLURL   string `json:"html_url"`
}

type repository struct {
	ID            int64   `json:"id"`
	NodeID        string  `json:"node_id"`
	Name          string  `json:"name"`
	FullName      string  `json:"full_name"`
	Owner         account `json:"owner"`
	Private       bool    `json:"private"`
	Archived      bool    `json:"archived"`
	DefaultBranch string  `json:"default_branch"`
	HTMLURL       string  `json:"html_url"`
	// UpdatedAt is the repository's clock in repository events (see clockOf).
	UpdatedAt stamp `json:"updated_at"`
}

type installation struct {
	ID                  int64             `json:"id"`
	AppID               int64             `json:"app_id"`
	Account             account           `json:"account"`
	TargetID            int64             `json:"target_id"`
	TargetType          string            `json:"target_type"`
	RepositorySelection string            `json:"repository_selection"`
	SuspendedAt         *github.Timestamp `json:"suspended_at"`
	UpdatedAt           stamp             `json:"updated_at"`
}

type gitRef struct {
	Ref string `json:"ref"`
	SHA string `json:"sha"`
}

type pullRequest struct {
	NodeID    string            `json:"node_id"`
	ID        int64             `json:"id"`
	Number    int               `json:"number"`
	Title     string            `json:"title"`
	State     string            `json:"state"`
	Draft     bool              `json:"draft"`
	Merged    bool              `json:"merged"`
	MergedAt  *github.Timestamp `json:"merged_at"`
	ClosedAt  *github.Timestamp `json:"closed_at"`
	UpdatedAt stamp             `json:"updated_at"`
	Head      gitRef            `json:"head"`
	Base      gitRef            `json:"base"`
	User      account           `json:"user"`
	HTMLURL   string            `json:"html_url"`
}

type issue struct {
	NodeID      string            `json:"node_id"`
	ID          int64             `json:"id"`
	Number      int               `json:"number"`
	Title       string            `json:"title"`
	State       string            `json:"state"`
	StateReason string            `json:"state_reason"`
	ClosedAt    *github.Timestamp `json:"closed_at"`
	UpdatedAt   stamp             `json:"updated_at"`
	User        account           `json:"user"`
	HTMLURL     string            `json:"html_url"`
}

type comment struct {
	NodeID    string  `json:"node_id"`
	ID        int64   `json:"id"`
	CommitID  string  `json:"commit_id"`
	Path      string  `json:"path"`
	User      account `json:"user"`
	Body      string  `json:"body"`
	HTMLURL   string  `json:"html_url"`
	UpdatedAt stamp   `json:"updated_at"`
}

type review struct {
	NodeID      string  `json:"node_id"`
	ID          int64   `json:"id"`
	CommitID    string  `json:"commit_id"`
	State       string  `json:"state"`
	User        account `json:"user"`
	Body        string  `json:"body"`
	HTMLURL     string  `json:"html_url"`
	SubmittedAt stamp   `json:"submitted_at"`
}

// login is the account's login, "" for none.
func (a *account) login() string {
	if a == nil {
		return ""
	}
	return a.Login
}
