package models

// User is a GitHub account seen as an event's sender.
type User struct {
	// ID is GitHub's numeric user id.
	ID int64 `gorm:"column:id;primaryKey;autoIncrement:false"`
	// NodeID is GitHub's global node id.
	NodeID string `gorm:"column:node_id"`
	// Login is the account's login.
	Login string `gorm:"column:login"`
	// Type is "User", "Bot" or "Organization".
	Type string `gorm:"column:type"`
	// SiteAdmin is GitHub's site_admin flag.
	SiteAdmin bool `gorm:"column:site_admin"`
	// HTMLURL is the account's page.
	HTMLURL string `gorm:"column:html_url"`
	Tracking
}

// TableName is the users table.
func (User) TableName() string { return "github_users" }
