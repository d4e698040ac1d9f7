package replay

// OriginAllowed exports originAllowed for the tests.
var OriginAllowed = originAllowed
