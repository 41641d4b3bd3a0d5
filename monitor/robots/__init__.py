"""robots.txt, under one roof: what Google's parser decides for a URL (``matcher``, pure), the
``Sitemap:`` lines of a file (``sitemaps``, pure), how a fetched version is judged (``judge``,
pure) and how two versions differ (``diff``, pure); the one reader and cache the check and the
URL checks share (``reader``), the stored versions (``versions``) and the watch a check runs
over its hosts (``watch``).
"""
