package agentd

import "flag"

// oidcRoleFlag defines --oidc-role-claim.
func oidcRoleFlag(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.OIDCRoleClaim, "oidc-role-claim", cfg.OIDCRoleClaim,
		"OIDC token `claim` holding the token's role (reader, approver, writer or admin); a token without it is a reader "+
			"(default: no claim, every OIDC token is a writer)")
}
