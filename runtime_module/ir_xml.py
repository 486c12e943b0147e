"""Is this `model.xml` an OpenVINO IR that names nothing outside itself?  Parsed, not searched.

Why a parse: the check before issue 52 searched the bytes for `<!DOCTYPE`, and a UTF-16
document (every character two bytes) holding a DTD with an external entity passed it; OpenVINO
read that file.  Any byte search misses the next encoding.  Here the document is read by an XML
parser, in whatever encoding its bytes say, and refused at the first document type, entity or
notation declaration, or external entity reference, whatever the encoding was.

Why the standard library's expat and not defusedxml: defusedxml is expat with these same
handlers set to refuse, plus wrappers for parsers provmap does not use; the dozen lines here
need no new dependency and say exactly what is refused.

Why only UTF-8 and UTF-16: OpenVINO reads the IR with pugixml, which picks the encoding from
the bytes themselves (a byte-order mark, or the first characters' layout).  A declared encoding
expat would honour and pugixml would not (a single-byte code page) makes the two parsers read
two different documents, and the check would vouch for the one OpenVINO never reads.  OpenVINO
writes `<?xml version="1.0"?>` (UTF-8), so the allowed set costs an honest IR nothing.
"""

from __future__ import annotations

from xml.parsers import expat

#: Encodings both expat and OpenVINO's pugixml read from the bytes alike (None: undeclared).
_SAME_IN_BOTH = {None, "utf-8", "utf8", "utf-16", "utf-16le", "utf-16be"}
_WHAT = "an XML document whose root element is <net>, without a document type"


class IRXMLError(ValueError):
    """Why the document is not an IR provmap loads (one line, no file name)."""


def check(data: bytes) -> None:
    """Parse `data` whole; IRXMLError unless it is well-formed XML in UTF-8 or UTF-16 with the
    root element `net` and no DTD, entity or notation anywhere."""
    p = expat.ParserCreate()
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    root: list[str] = []

    def refuse(what):
        def handler(*_):
            raise IRXMLError(f"{_WHAT}: this one has {what} at line {p.CurrentLineNumber}")
        return handler

    def declared(_version, encoding, _standalone):
        if encoding is not None and encoding.lower() not in _SAME_IN_BOTH:
            raise IRXMLError(f"encoding {encoding[:40]!r} declared; an IR is UTF-8 or UTF-16 "
                             "(what OpenVINO's reader detects from the bytes)")

    def start(name, _attrs):
        if not root:
            root.append(name)
            if name != "net":
                raise IRXMLError(f"root element <{name[:40]!r}>, expected <net>")

    p.XmlDeclHandler = declared
    p.StartDoctypeDeclHandler = refuse("a document type")
    p.EntityDeclHandler = refuse("an entity declaration")
    p.UnparsedEntityDeclHandler = refuse("an entity declaration")
    p.NotationDeclHandler = refuse("a notation declaration")
    p.ExternalEntityRefHandler = refuse("an external entity reference")
    p.SkippedEntityHandler = refuse("an entity reference")
    p.StartElementHandler = start
    try:
        p.Parse(data, True)
    except expat.ExpatError as e:
        raise IRXMLError(f"{_WHAT}; {e}") from None
    if not root:  # expat reports an empty document itself; kept for clarity
        raise IRXMLError(f"{_WHAT}; no element")
