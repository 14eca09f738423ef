import json

from django.db import connection
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def create_order(request):
    with connection.cursor() as cur:
        cur.execute("INSERT INTO orders (item) VALUES (%s) RETURNING id",
                    [json.loads(request.body)["item"]])
        return JsonResponse({"order": cur.fetchone()[0]}, status=201)
