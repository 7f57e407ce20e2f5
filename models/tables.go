package models

// GitHubTables are the tables written from GitHub's events: the ledger first, then the
// typed tables in the order their rows refer to one another least.
func GitHubTables() []string {
	return []string{
		Delivery{}.TableName(), PullRequest{}.TableName(), Issue{}.TableName(), Comment{}.TableName(),
		Push{}.TableName(), Branch{}.TableName(), Installation{}.TableName(), Repository{}.TableName(), User{}.TableName(),
	}
}
