package leaderread

// APIPrefix is apiPrefix, for the external tests.
var APIPrefix = apiPrefix
